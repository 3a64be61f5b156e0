"""nbtrain.toml: a JobSpec and the job's parameters as TOML (written with tomli-w, read with tomllib).

Layout (keys left out take the JobSpec default; TOML has no null)::

    [job]          name, nodes, gpus, device, strategy, mixed_precision, backend, image, checkpoint_dir,
                   resume_from, max_restarts, keep_checkpoints, timeout_s, collective_timeout_s,
                   max_capture_mb, allow_secrets
    [job.env]      NAME = "value" for every rank
    [tracking]     enabled, experiment
    [kubernetes]   flavor, namespace, queue, service_account, cpu, memory
    [kubernetes.node_selector] / [kubernetes.secret_env] / [[kubernetes.tolerations]]
    [parameters.NAME]  type ("bool", "int", "float", "str", "literal"), default (absent for None)
    [source]       where the job came from (informational: notebook, cell, bundle digest)

Every error names the file and the line: TOML syntax errors (tomllib's own position), unknown keys,
values of the wrong type and values JobSpec refuses.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbtrain.errors import SpecError
from nbtrain.spec import JobSpec

from .parameters import KINDS, Parameter

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["dump_job_toml", "load_job_toml"]


@dataclass(frozen=True)
class _Field:
    spec: str  # JobSpec field
    table: str  # "job", "tracking" or "kubernetes"
    key: str
    kind: type | tuple[type, ...]
    flag: str  # the %%distributed flag JobSpec names in its messages


_FIELDS = (
    _Field("name", "job", "name", str, "--name"),
    _Field("nodes", "job", "nodes", int, "--nodes"),
    _Field("procs_per_node", "job", "gpus", int, "--gpus"),
    _Field("device", "job", "device", str, "--device"),
    _Field("strategy", "job", "strategy", str, "--strategy"),
    _Field("mixed_precision", "job", "mixed_precision", str, "--mixed-precision"),
    _Field("backend", "job", "backend", str, "--backend"),
    _Field("image", "job", "image", str, "--image"),
    _Field("checkpoint_dir", "job", "checkpoint_dir", str, "--checkpoint-dir"),
    _Field("resume_from", "job", "resume_from", str, "--resume-from"),
    _Field("max_restarts", "job", "max_restarts", int, "--max-restarts"),
    _Field("keep_checkpoints", "job", "keep_checkpoints", int, "--keep-checkpoints"),
    _Field("timeout_s", "job", "timeout_s", (int, float), "--timeout"),
    _Field("collective_timeout_s", "job", "collective_timeout_s", (int, float), "--collective-timeout"),
    _Field("max_capture_mb", "job", "max_capture_mb", (int, float), "--max-capture-mb"),
    _Field("allow_secrets", "job", "allow_secrets", bool, "--allow-secrets"),
    _Field("env", "job", "env", dict, "--env"),
    _Field("tracking", "tracking", "enabled", bool, "--no-tracking"),
    _Field("experiment", "tracking", "experiment", str, "--experiment"),
    _Field("flavor", "kubernetes", "flavor", str, "--flavor"),
    _Field("namespace", "kubernetes", "namespace", str, "--namespace"),
    _Field("queue", "kubernetes", "queue", str, "--queue"),
    _Field("service_account", "kubernetes", "service_account", str, "--service-account"),
    _Field("cpu", "kubernetes", "cpu", str, "--cpu"),
    _Field("memory", "kubernetes", "memory", str, "--memory"),
    _Field("node_selector", "kubernetes", "node_selector", dict, "--node-selector"),
    _Field("secret_env", "kubernetes", "secret_env", dict, "--secret-env"),
    _Field("tolerations", "kubernetes", "tolerations", list, "--toleration"),
)
_TABLES = ("job", "tracking", "kubernetes", "parameters", "source")

HEADER = """\
# nbtrain job specification: what `nbtrain submit .` runs, and where.
# Flags of `nbtrain submit` override these values for one submission (nbtrain submit --help).
# Keys left out take nbtrain's defaults. Parameters: `--param NAME=VALUE`, or edit a default below.
"""


def dump_job_toml(spec: JobSpec, parameters: list[Parameter], source: Mapping[str, Any]) -> str:
    """nbtrain.toml for ``spec``, ``parameters`` and the informational ``source`` table."""
    import tomli_w

    values = spec.to_dict()
    tables: dict[str, dict[str, Any]] = {"job": {}, "tracking": {}, "kubernetes": {}}
    for field in _FIELDS:
        value = values[field.spec]
        if value is None or (isinstance(value, (dict, list)) and not value):
            continue
        tables[field.table][field.key] = value
    data: dict[str, Any] = {k: v for k, v in tables.items() if v}
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
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise SpecError(f"{path}: not valid TOML: {error}. Fix that line (see nbtrain export for the layout).") from None
    for table in data:
        if table not in _TABLES or not isinstance(data[table], dict):
            raise SpecError(
                f"{path} line {_line_of(text, None, table)}: unknown table or key {table!r}; "
                f"nbtrain.toml has the tables {', '.join(_TABLES)}."
            )
    known = {(f.table, f.key): f for f in _FIELDS}
    kwargs: dict[str, Any] = {}
    for table in ("job", "tracking", "kubernetes"):
        for key, value in data.get(table, {}).items():
            field = known.get((table, key))
            line = _line_of(text, table, key)
            if field is None:
                keys = ", ".join(f.key for f in _FIELDS if f.table == table)
                raise SpecError(f"{path} line {line}: unknown key {key!r} in [{table}]; known keys: {keys}.")
            if not isinstance(value, field.kind) or (field.kind is int and isinstance(value, bool)):
                want = " or ".join(t.__name__ for t in (field.kind if isinstance(field.kind, tuple) else (field.kind,)))
                raise SpecError(
                    f"{path} line {line}: {table}.{key} = {value!r} is a {type(value).__name__}; expected {want}."
                )
            kwargs[field.spec] = tuple(value) if isinstance(value, list) else value
    try:
        spec = JobSpec(**kwargs)
    except SpecError as error:
        message = str(error)
        field = next((f for f in _FIELDS if message.startswith(f.flag + ":")), None)
        where = f" line {_line_of(text, field.table, field.key)} ({field.table}.{field.key})" if field else ""
        raise SpecError(f"{path}{where}: {message}") from None
    except TypeError as error:
        raise SpecError(f"{path}: {error}") from None
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
