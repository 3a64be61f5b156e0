"""Where the storage roots come from: ``NBTRAIN_STORAGE_*``, ``./nbtrain.toml`` and the user's config.

Highest priority first:

1. ``NBTRAIN_STORAGE_DATASETS`` / ``NBTRAIN_STORAGE_CHECKPOINTS`` / ``NBTRAIN_STORAGE_ARTIFACTS``;
2. the ``[storage]`` table of ``./nbtrain.toml`` (the project);
3. the ``[storage]`` table of the user's config: ``$NBTRAIN_CONFIG``, else
   ``$XDG_CONFIG_HOME/nbtrain/config.toml`` (``~/.config/nbtrain/config.toml``).

:func:`roots_from_table` and :func:`roots_from_env` are pure, so another source (a profile) builds a
:class:`StorageRoots` with them and layers it with :meth:`StorageRoots.over`; :func:`load_roots` is the
one function here that reads files.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nbtrain.errors import SpecError
from nbtrain.storage.uris import Kind, StorageRoots
from nbtrain.tomlfile import project_file, read_toml

__all__ = ["load_roots", "roots_from_env", "roots_from_table", "user_config_path"]

def roots_from_table(table: Mapping[str, Any], source: str) -> StorageRoots:
    """A ``[storage]`` table (``datasets = "s3://…"`` …) as roots; ``source`` names the file for messages.

    Raises SpecError for an unknown key or a value that is not a non-empty string.
    """
    known = {kind.value for kind in Kind}
    values: dict[str, str] = {}
    for key, value in table.items():
        if key not in known:
            raise SpecError(f"{source}: unknown key {key!r} in [storage]; the keys are "
                            f"{', '.join(sorted(known))} (each an fsspec URL or a local path).")
        if not isinstance(value, str) or not value.strip():
            raise SpecError(f"{source}: [storage] {key} = {value!r} must be a non-empty string such as "
                            f"\"s3://bucket/{key}\" or \"/mnt/data/{key}\".")
        values[key] = value.strip()
    return StorageRoots(**values, sources=tuple((k, f"{source} [storage] {k}") for k in sorted(values)))


def roots_from_env(env: Mapping[str, str]) -> StorageRoots:
    """Roots from ``NBTRAIN_STORAGE_*`` in ``env`` (empty values are unset)."""
    values = {kind.value: env[kind.env].strip() for kind in Kind if env.get(kind.env, "").strip()}
    return StorageRoots(**values, sources=tuple((kind.value, kind.env) for kind in Kind if kind.value in values))


def user_config_path(env: Mapping[str, str]) -> Path:
    """The user's config file (it need not exist): ``$NBTRAIN_CONFIG`` or ``$XDG_CONFIG_HOME/nbtrain/config.toml``."""
    if env.get("NBTRAIN_CONFIG"):
        return Path(env["NBTRAIN_CONFIG"]).expanduser()
    base = Path(env["XDG_CONFIG_HOME"]).expanduser() if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "nbtrain" / "config.toml"


def _storage_table(path: Path) -> StorageRoots:
    try:
        data = read_toml(path, missing_ok=True)
    except (OSError, SpecError) as error:
        why = str(error).removeprefix(f"{path}: ").rstrip(".")
        raise SpecError(f"{path}: cannot read its [storage] table ({why}); fix the file or remove it.") from None
    table = data.get("storage", {})
    if not isinstance(table, dict):
        raise SpecError(f"{path}: 'storage' must be a table ([storage] with datasets/checkpoints/artifacts keys).")
    return roots_from_table(table, str(path))


def load_roots(cwd: Path | None = None, env: Mapping[str, str] | None = None) -> StorageRoots:
    """The roots in effect here: env over ``./nbtrain.toml`` over the user's config (see the module docstring)."""
    env = os.environ if env is None else env
    project = project_file(cwd)
    return roots_from_env(env).over(_storage_table(project).over(_storage_table(user_config_path(env))))
