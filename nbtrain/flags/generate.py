"""Text generated from the table: the dialog's data, options.generated.ts, the Markdown reference; ``--write``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nbtrain.errors import SpecError
from nbtrain.flags.table import CLI_ONLY, MAGIC_ONLY, OPTIONS, BackendInfo, Option, installed_backends, options_for

__all__ = ["BEGIN", "END", "GENERATED", "dialog_data", "main", "markdown", "regenerated", "typescript"]


def _builtin() -> list[BackendInfo]:
    """The backends the checked-in generated files show: nbtrain's own entry points (what else is installed on the
    machine that writes them must not change them; a backend installed later is listed by ``--help``)."""
    return installed_backends(builtin=True)


def _choices(option: Option, backends: list[BackendInfo]) -> tuple[str, ...]:
    return tuple(b.name for b in backends) if option.field == "backend" else option.choices


def dialog_data() -> dict[str, Any]:
    """JSON-serialisable description of the ``%%distributed`` options for the JupyterLab dialog."""
    known = _builtin()
    options = {}
    for option in options_for("magic"):
        limits = option.limits or option.number_limits  # a float's "min" is exclusive: it must be above it
        options[option.flag] = {
            "field": option.field, "type": option.kind, "choices": list(_choices(option, known)),
            "default": option.default_json, "min": limits[0] if limits else None,
            "max": limits[1] if limits else None, "help": option.help,
            "backends": None if option.backends is None else [b.name for b in known if b.name in option.backends],
            "toml": option.toml, "repeatable": option.kind in ("pairs", "tolerations", "list"),
        }
    backends = [{"name": b.name, "title": b.title, "does": b.does} for b in known]
    return {"backends": backends, "options": options}


def typescript() -> str:
    """labextension/src/plugin/options.generated.ts: :func:`dialog_data` as a typed constant."""
    data = dialog_data()
    def one(value: Any) -> str:  # one entry per line: diffs show which option changed
        return json.dumps(value, ensure_ascii=False)

    backends = "".join(f"    {one(b)},\n" for b in data["backends"])
    options = "".join(f"    {one(flag)}: {one(o)},\n" for flag, o in data["options"].items())
    return ("// Generated from nbtrain/flags/table.py by `python -m nbtrain.flags --write`: do not edit by hand.\n"
            "/** The %%distributed options: flags, types, choices, defaults, ranges, help and backends. */\n"
            f"export const JOB_OPTIONS = {{\n  backends: [\n{backends}  ],\n  options: {{\n{options}  }},\n}} as const;\n")



def _type_text(option: Option, backends: list[BackendInfo]) -> str:
    if _choices(option, backends):
        return " \\| ".join(_choices(option, backends))
    if option.limits:
        return f"integer {option.limits[0]}–{option.limits[1]}"
    if option.number_limits:
        return f"number > {option.number_limits[0]:g}, ≤ {option.number_limits[1]:.0f}"
    return {"int": "integer", "float": "number", "str": "text", "switch": "switch",
            "pairs": f"{option.metavar}, repeatable", "tolerations": f"{option.metavar}, repeatable",
            "list": f"{option.metavar}, repeatable"}[option.kind]


def _honoured(option: Option, backend: str) -> str:
    """A backend's cell of the reference: yes, no, or the option that must come with it."""
    if option.backends is not None and backend not in option.backends:
        return "no"
    needed = (option.needs or {}).get(backend)
    if needed is None:
        return "yes"
    flags = [o.flag for o in OPTIONS if o.field == needed[0]]
    return f"with {flags[0] if flags else needed[0]}"


def markdown() -> str:
    """The options reference: one Markdown table (flag, type, default, TOML key, one column per backend, help)."""
    known = _builtin()
    head = ["flag", "type", "default", "TOML key", *(b.name for b in known), "help"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for option in OPTIONS:
        flag = f"`{option.flag}`" + (f" {option.metavar}" if option.metavar else "")
        where = {MAGIC_ONLY: "Notebook only. ", CLI_ONLY: "`nbtrain submit` only. "}.get(option.surfaces, "")
        cells = [flag.replace("|", "\\|"), _type_text(option, known), option.default_shown or "—",
                 f"`{option.toml}`" if option.toml else "—",
                 *(_honoured(option, b.name) for b in known),
                 where + option.help]
        rows.append("| " + " | ".join(cells) + " |")
    intro = ("Generated from `nbtrain/flags/table.py` by `python -m nbtrain.flags --write`; do not edit by hand. "
             "`%%distributed` takes every option not marked otherwise; `nbtrain submit` and `nbtrain manifests` take "
             "the job options as overrides of `nbtrain.toml`. A backend marked \"no\" refuses a job that sets the "
             "option, before anything starts.")
    return intro + "\n\n" + "\n".join(rows) + "\n"


BEGIN, END = "<!-- options:begin -->", "<!-- options:end -->"
#: Checked-in generated files, relative to the repository root: path -> how its generated part is written.
GENERATED = {"README.md": "markdown", "docs/options.md": "markdown",
             "labextension/src/plugin/options.generated.ts": "typescript"}


def regenerated(path: str, text: str) -> str:
    """``text`` (the current content of the generated file ``path``) with its generated part brought up to date."""
    if GENERATED[path] == "typescript":
        return typescript()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise SpecError(f"{path}: the markers {BEGIN} and {END} are missing; put them where the options go.")
    return text[: start + len(BEGIN)] + "\n" + markdown() + text[end:]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nbtrain.flags --markdown|--json|--typescript|--write [ROOT]``."""
    parser = argparse.ArgumentParser(prog="python -m nbtrain.flags", description="Print or write the options reference.")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--markdown", action="store_true", help="print the options reference (Markdown)")
    mode.add_argument("--json", action="store_true", help="print the dialog's data (JSON)")
    mode.add_argument("--typescript", action="store_true", help="print options.generated.ts")
    mode.add_argument("--write", metavar="ROOT", nargs="?", const=".",
                      help="update README.md, docs/options.md and options.generated.ts under ROOT (default .)")
    args = parser.parse_args(argv)
    if args.write is None:
        text = markdown() if args.markdown else typescript() if args.typescript else json.dumps(dialog_data(), indent=2)
        print(text.rstrip("\n"))
        return 0
    for name in GENERATED:
        path = Path(args.write) / name
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        new = regenerated(name, old)
        if new != old:
            path.write_text(new, encoding="utf-8")
            print(f"updated {path}", file=sys.stderr)
    return 0
