"""manifest.json contents. Deterministic: no timestamps, no host names, no random ids.

The same cell and namespace give the same manifest, hence the same digest, in the same environment.
"""

from __future__ import annotations

import functools
import hashlib
import platform
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from .model import CapturedName
from .reader import FORMAT_VERSION

__all__ = ["build_manifest", "nbtrain_version", "versions"]

_DEFAULT_VERSION = "0.1.0"


@functools.cache
def _distribution_version(name: str) -> str | None:
    import importlib.metadata  # ~10 ms: only when a bundle is built

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def nbtrain_version() -> str:
    """nbtrain's version: ``nbtrain.__version__``, else the installed distribution's, else 0.1.0."""
    module = sys.modules.get("nbtrain")
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    return _distribution_version("nbtrain") or _DEFAULT_VERSION


def versions() -> dict[str, str | None]:
    """Versions that decide whether a worker can run the bundle (read without importing them)."""
    return {
        "python": platform.python_version(),
        "cloudpickle": _distribution_version("cloudpickle"),
        "torch": _distribution_version("torch"),
        "accelerate": _distribution_version("accelerate"),
    }


def build_manifest(
    *,
    kind: str,
    files: Mapping[str, bytes],
    captured: Sequence[CapturedName],
    notebook: Mapping[str, str] | None,
    cell: Mapping[str, Any] | None,
    function: str | None,
) -> dict[str, Any]:
    """The manifest for ``files`` (which must not include manifest.json itself)."""
    return {
        "format": FORMAT_VERSION,
        "kind": kind,
        "entry": "main.py",
        "files": {rel: hashlib.sha256(data).hexdigest() for rel, data in sorted(files.items())},
        "sizes": {rel: len(data) for rel, data in sorted(files.items())},
        "captured": [c.to_json() for c in captured],
        "versions": versions(),
        "notebook": _plain(notebook) if notebook is not None else None,
        "cell": dict(cell) if cell is not None else None,
        "function": function,
        "created_by": f"nbtrain {nbtrain_version()}",
    }


def _plain(info: Mapping[str, Any]) -> dict[str, Any]:
    """Notebook info as JSON scalars (a Path or other object becomes its str)."""
    return {str(k): v if v is None or isinstance(v, (str, int, float, bool)) else str(v) for k, v in info.items()}
