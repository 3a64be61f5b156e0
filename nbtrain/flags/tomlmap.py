"""nbtrain.toml <-> JobSpec through the table's ``toml`` keys, both directions (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nbtrain.errors import SpecError
from nbtrain.flags.table import OPTIONS
from nbtrain.spec import JobSpec

__all__ = ["TOML_TABLES", "TomlError", "spec_from_toml", "spec_to_toml"]

_TOML_TYPES: Mapping[str, tuple[type, ...]] = {
    "int": (int,), "float": (int, float), "str": (str,), "choice": (str,), "switch": (bool,),
    "pairs": (dict,), "tolerations": (list,), "list": (list,),
}
#: The tables of nbtrain.toml, in the table's order (the options' ``toml`` keys name them).
TOML_TABLES: tuple[str, ...] = tuple(dict.fromkeys(o.toml.split(".")[0] for o in OPTIONS if o.toml))


class TomlError(SpecError):
    """A bad nbtrain.toml value; ``table``/``key`` locate it when known, ``from_spec``: JobSpec refused it."""

    def __init__(self, message: str, table: str | None = None, key: str | None = None, from_spec: bool = False):
        super().__init__(message)
        self.table, self.key, self.from_spec = table, key, from_spec


def spec_to_toml(spec: JobSpec) -> dict[str, dict[str, Any]]:
    """``{table: {key: value}}`` of ``spec`` for nbtrain.toml (None and empty values left out: TOML has no null)."""
    values = spec.to_dict()
    tables: dict[str, dict[str, Any]] = {}
    for option in OPTIONS:
        if option.toml is None or option.field is None:
            continue
        value = values[option.field]
        if value is None or (isinstance(value, (dict, list)) and not value):
            continue
        table, key = option.toml.split(".")
        tables.setdefault(table, {})[key] = value
    return {t: tables[t] for t in TOML_TABLES if t in tables}


def spec_from_toml(data: Mapping[str, Mapping[str, Any]]) -> JobSpec:
    """Inverse of :func:`spec_to_toml` (tables other than :data:`TOML_TABLES` are ignored here).

    Raises :class:`TomlError` for unknown keys, values of the wrong type and values JobSpec refuses.
    """
    by_key = {tuple(o.toml.split(".")): o for o in OPTIONS if o.toml}
    kwargs: dict[str, Any] = {}
    for table in TOML_TABLES:
        for key, value in data.get(table, {}).items():
            option = by_key.get((table, key))
            if option is None or option.field is None:
                known = ", ".join(k for t, k in by_key if t == table)
                raise TomlError(f"unknown key {key!r} in [{table}]; known keys: {known}.", table, key)
            types = _TOML_TYPES[option.kind]
            if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
                raise TomlError(f"{table}.{key} = {value!r} is a {type(value).__name__}; expected "
                                f"{' or '.join(t.__name__ for t in types)}.", table, key)
            kwargs[option.field] = tuple(value) if isinstance(value, list) else value
    try:
        return JobSpec(**kwargs)
    except SpecError as error:
        message = str(error)
        option = next((o for o in OPTIONS if o.toml and message.startswith(o.flag + ":")), None)
        if option is None or option.toml is None:
            raise TomlError(message) from None
        table, key = option.toml.split(".")
        raise TomlError(message, table, key, from_spec=True) from None
