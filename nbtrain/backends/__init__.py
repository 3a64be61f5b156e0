"""Backends: where gangs run, found through the ``nbtrain.backends`` entry-point group.

A backend is a :class:`nbtrain.backends.base.Backend` subclass registered by any installed package::

    [project.entry-points."nbtrain.backends"]
    slurm = "nbtrain.backends.slurm:SlurmBackend"

so adding one is a new package folder plus that line, not edits across nbtrain (docs/backends.md). The names are
read by :mod:`nbtrain.registry` without importing any backend; a backend's class is loaded lazily, on first use
(a Kubernetes client import costs seconds).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nbtrain.errors import SpecError
from nbtrain.registry import ENTRY_POINT_GROUP, backend_entry_points, backend_names, unknown_backend

if TYPE_CHECKING:
    from nbtrain.backends.base import Backend

__all__ = ["ENTRY_POINT_GROUP", "backend_class", "backend_names", "get_backend"]


def backend_class(name: str) -> type[Backend]:
    """The class of backend ``name``; SpecError naming the installed ones when unknown or broken."""
    from nbtrain.backends.base import Backend

    points = backend_entry_points()
    if name not in points:
        raise SpecError(unknown_backend(name))
    try:
        cls = points[name].load()
    except ImportError as error:
        raise SpecError(f"--backend {name} is not available: {error}; install what it needs "
                        f"(entry point {points[name].value}).") from error
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise SpecError(f"--backend {name}: entry point {points[name].value} is not an nbtrain Backend subclass.")
    return cls


def get_backend(name: str, **options: Any) -> Backend:
    """A new instance of backend ``name`` (options such as ``store=`` are passed to its constructor)."""
    return backend_class(name)(**options)
