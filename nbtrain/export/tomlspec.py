"""nbtrain.toml: a JobSpec and the job's parameters as TOML (written with tomli-w, read with tomllib).

Layout (keys left out take the JobSpec default; TOML has no null). The job tables come from the one
table of options, :data:`nbtrain.flags.OPTIONS` (each option's ``toml`` key; docs/options.md lists them)::

    [job]          name, nodes, gpus, device, strategy, ... (the job's options)
    [job.env]      NAME = "value" for every rank
    [tracking]     enabled, experiment
    [kubernetes]   flavor, namespace, queue, ... ; [kubernetes.node_selector], [[kubernetes.tolerations]] ...
    [parameters.NAME]  type ("bool", "int", "float", "str", "literal"), default (absent for None)
    [source]       where the job came from (notebook, cell, bundle digest: informational) and the profile its
                   cell used (profile = "NAME VERSION": `nbtrain submit` holds that profile's locks again)

Every error names the file and the line: TOML syntax errors (tomllib's own position), unknown keys,
values of the wrong type and values JobSpec refuses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nbtrain.errors import SpecError
from nbtrain.flags import TOML_TABLES, TomlError, spec_from_toml, spec_to_toml
from nbtrain.spec import JobSpec
from nbtrain.tomlfile import parse_toml, tomllib  # noqa: F401 - tomllib: the reader tests parse with

from .parameters import KINDS, Parameter

__all__ = ["dump_job_toml", "load_job_toml"]


_TABLES = (*TOML_TABLES, "parameters", "source", "profiles", "storage")  # [profiles.NAME]: nbtrain.profiles reads them; [storage]: nbtrain.storage.config

HEADER = """\
# nbtrain job specification: what `nbtrain submit .` runs, and where.
# Flags of `nbtrain submit` override these values for one submission (nbtrain submit --help).
# Keys left out take nbtrain's defaults. Parameters: `--param NAME=VALUE`, or edit a default below.
"""


def dump_job_toml(spec: JobSpec, parameters: list[Parameter], source: Mapping[str, Any]) -> str:
    """nbtrain.toml for ``spec``, ``parameters`` and the informational ``source`` table."""
    import tomli_w

    data: dict[str, Any] = dict(spec_to_toml(spec))
    if parameters:
        data["parameters"] = {
            p.name: {"type": p.kind, **({"default": p.default} if _tomlable(p.default) else {})} for p in parameters
        }
    clean_source = {k: v for k, v in source.items() if v is not None}
    if clean_source:
        data["source"] = clean_source
    return HEADER + "\n" + tomli_w.dumps(data)


def _tomlable(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, (list, tuple)):
        return all(_tomlable(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _tomlable(v) for k, v in value.items())
    return isinstance(value, (str, int, float, bool))


def load_job_toml(path: Path) -> tuple[JobSpec, dict[str, Parameter], dict[str, Any]]:
    """Read ``path``: ``(spec, {name: Parameter}, source table)``.

    Raises :class:`SpecError` naming the file and line for bad TOML, unknown keys, wrong types and
    values JobSpec refuses.
    """
    text = path.read_text(encoding="utf-8")
    data = parse_toml(text, path, fix="Fix that line (see nbtrain export for the layout).")
    for table in data:
        if table not in _TABLES or not isinstance(data[table], dict):
            raise SpecError(
                f"{path} line {_line_of(text, None, table)}: unknown table or key {table!r}; "
                f"nbtrain.toml has the tables {', '.join(_TABLES)}."
            )
    try:
        spec = spec_from_toml({table: data.get(table, {}) for table in TOML_TABLES})
    except TomlError as error:
        if error.table is None or error.key is None:
            raise SpecError(f"{path}: {error}") from None
        line = _line_of(text, error.table, error.key)
        where = f" ({error.table}.{error.key})" if error.from_spec else ""
        raise SpecError(f"{path} line {line}{where}: {error}") from None
    parameters: dict[str, Parameter] = {}
    for name, entry in data.get("parameters", {}).items():
        line = _line_of(text, f"parameters.{name}", "type")
        kind = entry.get("type") if isinstance(entry, dict) else None
        if kind not in KINDS:
            raise SpecError(
                f"{path} line {line}: parameters.{name}.type = {kind!r}; use one of {', '.join(KINDS)}."
            )
        assert isinstance(entry, dict)
        parameters[name] = Parameter(name, str(kind), entry.get("default"))
    return spec, parameters, dict(data.get("source", {}))


def _line_of(text: str, table: str | None, key: str) -> int:
    """1-based line of ``key`` inside ``[table]`` (``table`` None: the table header ``[key]``); 1 if not found."""
    current: str | None = None
    header = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
    assignment = re.compile(r"^\s*([A-Za-z0-9_\-\"'.]+)\s*=")
    for number, line in enumerate(text.splitlines(), 1):
        match = header.match(line)
        if match:
            current = match.group(1).replace('"', "").replace("'", "")
            if table is None and (current == key or current.startswith(key + ".")):
                return number
            continue
        found = assignment.match(line)
        if found:
            name = found.group(1).strip("\"'")
            if table is None and current is None and name.split(".")[0] == key:
                return number
            if current == table and name == key:
                return number
            if table is not None and current is None and name == f"{table}.{key}":
                return number
    return 1
