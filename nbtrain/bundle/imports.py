"""Import statements for modules and for objects that live in importable modules.

Nothing here imports a module: only modules already in :data:`sys.modules` are consulted, so
capturing never runs third-party import code.
"""

from __future__ import annotations

import sys
import types
from typing import Any

__all__ = ["import_for_module", "import_for_object"]


def import_for_module(name: str, module: types.ModuleType) -> str | None:
    """``import x`` / ``import x.y as z`` binding ``name`` to ``module``; None if not importable.

    A module is importable when :data:`sys.modules` holds it under its own ``__name__``.
    """
    modname = getattr(module, "__name__", None)
    if not isinstance(modname, str) or modname == "__main__" or sys.modules.get(modname) is not module:
        return None
    if name == modname:
        return f"import {modname}"
    return f"import {modname} as {name}"


def import_for_object(name: str, obj: Any) -> str | None:
    """``from pkg import attr [as name]`` for an object importable from a real module, else None.

    The object qualifies when its ``__module__`` is a module in :data:`sys.modules` (not ``__main__``)
    whose attribute ``__qualname__`` (a plain top-level name) *is* the object. The statement names the
    shortest public parent package that exposes the very same object (``from sklearn.datasets import
    load_digits`` rather than ``sklearn.datasets._base``).
    """
    try:
        modname = getattr(obj, "__module__", None)
        qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    except Exception:  # noqa: BLE001  # any user object: a raising __getattr__ means 'not a definition'
        return None
    if not isinstance(modname, str) or not isinstance(qualname, str):
        return None
    if modname == "__main__" or "." in qualname or "<" in qualname:
        return None
    home = _owner(modname, qualname, obj)
    if home is None:
        return None
    alias = "" if name == qualname else f" as {name}"
    return f"from {home} import {qualname}{alias}"


def _owner(modname: str, attr: str, obj: Any) -> str | None:
    """Shortest public prefix of ``modname`` exposing ``obj`` as ``attr``; else ``modname`` itself."""
    module = sys.modules.get(modname)
    if module is None or not _exposes(module, attr, obj):
        return None
    parts = modname.split(".")
    for i in range(1, len(parts)):
        if parts[i - 1].startswith("_"):
            break  # a private package: only its full module path is reliable
        candidate = ".".join(parts[:i])
        parent = sys.modules.get(candidate)
        if parent is not None and _exposes(parent, attr, obj):
            return candidate
    return modname


def _exposes(module: types.ModuleType, attr: str, obj: Any) -> bool:
    try:
        return module.__dict__.get(attr, _MISSING) is obj
    except Exception:  # noqa: BLE001  # a module object with an exotic __dict__: not usable
        return False


_MISSING = object()
