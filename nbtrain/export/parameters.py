"""Papermill-style parameters: a cell tagged ``parameters`` becomes command-line options of train.py.

A parameter is a name assigned a plain literal in the ``parameters`` cell *that the job uses* (it was
captured as a value). Its type comes from the literal: ``bool``, ``int``, ``float``, ``str``, or
``literal`` (lists, dicts, tuples, ``None``...: read with :func:`ast.literal_eval`, falling back to the
text itself, so ``--data-path /x`` works for a ``data_path = None`` default).

train.py gets a "parameters" section right after the notebook's values (before the definitions, which
may use them as defaults). It reads, in increasing priority: the exported defaults, ``NBTRAIN_PARAMS``
(a JSON object ``{"NAME": "TEXT"}``; ``nbtrain submit DIR --param NAME=VALUE`` sets it in every rank's
environment), then the command line (``accelerate launch train.py --lr 3e-4``). ``--batch-size`` and
``--batch_size`` both work for ``batch_size``.
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nbtrain.bundle.model import Bundle, CapturedName, CaptureKind
from nbtrain.bundle.render import header
from nbtrain.errors import SpecError

from .notebook import NotebookCell, to_python

__all__ = [
    "ENV_NAME",
    "KINDS",
    "Parameter",
    "add_parameters",
    "convert",
    "kind_of",
    "parameter_names",
    "params_env",
]

#: Environment variable through which ``nbtrain submit --param`` reaches train.py.
ENV_NAME = "NBTRAIN_PARAMS"
KINDS = ("bool", "int", "float", "str", "literal")
_TITLE = "parameters (the notebook's `parameters` cell; python train.py --help)"
_VALUES_HEADER = header("values from the notebook")


@dataclass(frozen=True)
class Parameter:
    """One option of train.py: ``name``, its ``kind`` (one of :data:`KINDS`) and its ``default``."""

    name: str
    kind: str
    default: Any

    @property
    def option(self) -> str:
        """``--lr`` / ``--batch-size``."""
        return "--" + self.name.replace("_", "-")


def kind_of(value: Any) -> str:
    """The parameter kind of a default value."""
    for kind, types in (("bool", bool), ("int", int), ("float", float), ("str", str)):
        if type(value) is types:
            return kind
    return "literal"


def convert(kind: str, text: str) -> Any:
    """Convert command-line ``text`` to a value of ``kind`` exactly as train.py does; ValueError if it can't."""
    if kind == "bool":
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{text!r} is not a boolean; use true or false")
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    if kind == "str":
        return text
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def params_env(parameters: Mapping[str, Parameter], values: Mapping[str, str], *, allow_secrets: bool = False) -> str:
    """The ``NBTRAIN_PARAMS`` value for ``values`` (NAME -> TEXT), checked against ``parameters``.

    Raises :class:`SpecError` naming an unknown parameter (and the known ones), a value its kind refuses, or a
    secret-looking one (:func:`nbtrain.secrets.looks_secret`, unless ``allow_secrets``) as ``--param NAME``, the
    option the user typed (not the ``--env NBTRAIN_PARAMS`` it becomes).
    """
    from nbtrain.secrets import looks_secret, looks_secret_value

    for name, text in values.items():
        if not allow_secrets and looks_secret(name, text):
            why = "its value looks like a credential" if looks_secret_value(text) else "its name says it holds a secret"
            raise SpecError(f"--param {name}=...: this looks like a secret ({why}), and parameters are written in "
                            "plain text into the run's record and plan (as NBTRAIN_PARAMS). Give it to the job "
                            "through the environment its ranks inherit instead; if it is not a secret, pass "
                            "--allow-secrets.")
        parameter = parameters.get(name)
        if parameter is None:
            known = ", ".join(sorted(parameters)) or "none (the notebook has no `parameters` cell the job uses)"
            raise SpecError(f"--param {name}={text}: no parameter {name!r}; parameters: {known}.")
        try:
            convert(parameter.kind, text)
        except ValueError as error:
            raise SpecError(
                f"--param {name}={text}: not a valid {parameter.kind} ({error}); the default is {parameter.default!r}."
            ) from None
    return json.dumps(dict(values), sort_keys=True)


def text_of(value: Any) -> str:
    """The command-line text of a default (``True`` -> ``true``, lists as Python literals)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return repr(value)


def parameter_names(cells: Iterable[NotebookCell], tag: str = "parameters") -> list[str]:
    """Names assigned at top level in the cells tagged ``tag``, in order (empty when none is tagged)."""
    names: list[str] = []
    for cell in cells:
        if tag not in cell.tags:
            continue
        try:
            tree = ast.parse(to_python(cell.source))
        except (SyntaxError, ValueError):
            continue
        for stmt in tree.body:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
            for target in targets:
                if isinstance(target, ast.Name) and target.id not in names:
                    names.append(target.id)
    return names


_FUNCTION = '''\
def _nbtrain_parameters(defaults):
    """Parameters from NBTRAIN_PARAMS (JSON {"NAME": "TEXT"}, set by `nbtrain submit --param`) and the
    command line, over the exported defaults. Returns {name: value}."""
    import argparse
    import ast
    import builtins
    import json
    import os
    import sys

    def flag(text):
        if text.strip().lower() in ("1", "true", "yes", "on"):
            return True
        if text.strip().lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(text)

    def literal(text):
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError):
            return text

    flag.__name__, literal.__name__ = "bool", "literal"  # argparse names the type in its messages
    kinds = {"bool": flag, "int": builtins.int, "float": builtins.float, "str": builtins.str, "literal": literal}
    parser = argparse.ArgumentParser(description="Options of this exported nbtrain job.")
    for name, (kind, default) in defaults.items():
        options = ["--" + name.replace("_", "-")] + (["--" + name] if "_" in name else [])
        parser.add_argument(*options, dest=name, type=kinds[kind], default=default, metavar=kind.upper(),
                            help=f"default: {default!r}")
    from_env = json.loads(os.environ.get("NBTRAIN_PARAMS") or "{}")
    argv = [f"--{name}={text}" for name, text in from_env.items()] + sys.argv[1:]
    return vars(parser.parse_args(argv))
'''


def parameters_section(parameters: Sequence[Parameter]) -> str:
    """The text of train.py's parameters section (after the values it overrides)."""
    table = "".join(f"    {p.name!r}: ({p.kind!r}, {p.name}),\n" for p in parameters)
    assign = "".join(f"{p.name} = _nbtrain_values[{p.name!r}]\n" for p in parameters)
    return (
        f"{_FUNCTION}\n\n_nbtrain_values = _nbtrain_parameters({{\n{table}}})\n{assign}"
        "del _nbtrain_parameters, _nbtrain_values\n"
    )


def add_parameters(bundle: Bundle, names: Sequence[str], defaults: Mapping[str, Any]) -> tuple[Bundle, list[Parameter]]:
    """Make the captured values among ``names`` options of the bundle's program.

    ``defaults`` gives each value (the literal the bundle holds). Names the bundle does not capture
    as values are left out (the job does not use them). Returns the new bundle (main.py and the
    manifest updated: files, the cell's main.py line, ``parameters``) and the parameters, in
    ``names`` order; the bundle itself when none applies.
    """
    literal = {c.name for c in bundle.captured if c.kind is CaptureKind.LITERAL}
    chosen = [Parameter(n, kind_of(defaults[n]), defaults[n]) for n in names if n in literal and n in defaults]
    if not chosen:
        return bundle, []
    text = bundle.files["main.py"].decode("utf-8")
    start = text.find("\n" + _VALUES_HEADER + "\n")
    if start < 0:
        return bundle, []
    end = text.find("\n\n\n# --- ", start + 1)
    end = len(text) if end < 0 else end + 1
    block = "\n\n" + header(_TITLE) + "\n" + parameters_section(chosen)
    new_text = text[:end] + block + text[end:]
    added = block.count("\n")

    files = dict(bundle.files)
    files["main.py"] = new_text.encode("utf-8")
    manifest = dict(bundle.manifest)
    manifest["files"] = {rel: hashlib.sha256(data).hexdigest() for rel, data in sorted(files.items())}
    manifest["sizes"] = {rel: len(data) for rel, data in sorted(files.items())}
    if manifest.get("cell"):
        cell = dict(manifest["cell"])
        cell["main_line"] = int(cell["main_line"]) + added
        manifest["cell"] = cell
    manifest["parameters"] = [{"name": p.name, "kind": p.kind, "option": p.option} for p in chosen]
    options = {p.name: p.option for p in chosen}
    captured = tuple(
        CapturedName(c.name, c.kind, c.size, f"{c.detail}; option {options[c.name]}") if c.name in options else c
        for c in bundle.captured
    )
    manifest["captured"] = [c.to_json() for c in captured]
    return Bundle(files=files, manifest=manifest, captured=captured), chosen
