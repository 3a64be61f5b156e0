"""The one TOML reader: nbtrain.toml (a project's, beside the notebook or in the working directory, and a job
directory's), profile files and the user's config file are all read here (bottom layer: stdlib and errors only).

Every error is a :class:`~nbtrain.errors.SpecError` that names the file (or where the text came from), what is
wrong with it and, when the caller gives one, the fix. Writing nbtrain.toml is :mod:`nbtrain.export.tomlspec`'s.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from nbtrain.errors import SpecError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["PROJECT_FILE", "parse_toml", "project_file", "read_toml"]

#: The project's file name: nbtrain.toml beside the notebook, in the working directory, in a job directory.
PROJECT_FILE = "nbtrain.toml"


def project_file(directory: Path | None = None) -> Path:
    """The nbtrain.toml of ``directory`` (default: the working directory); it need not exist."""
    return (directory if directory is not None else Path.cwd()) / PROJECT_FILE


def parse_toml(text: str, where: str | Path, *, fix: str = "") -> dict[str, Any]:
    """``text`` parsed as TOML; SpecError "WHERE: not valid TOML: ERROR (line, column). FIX" when it is not."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise SpecError(f"{where}: not valid TOML: {error}.{' ' + fix if fix else ''}") from None


def read_toml(path: Path, *, missing_ok: bool = False, fix: str = "") -> dict[str, Any]:
    """The TOML file ``path`` as a dict (``{}`` when it does not exist and ``missing_ok``).

    SpecError naming the file for bad TOML (with ``fix``); OSError when it cannot be read (or is missing and not
    ``missing_ok``).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if missing_ok:
            return {}
        raise
    return parse_toml(text, path, fix=fix)
