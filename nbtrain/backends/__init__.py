"""Backends: where gangs run, found through the ``nbtrain.backends`` entry-point group.

A backend is a :class:`nbtrain.backends.base.Backend` subclass registered by any installed package::

    [project.entry-points."nbtrain.backends"]
    slurm = "nbtrain.backends.slurm:SlurmBackend"

so adding one is a new package folder plus that line, not edits across nbtrain. Entry points are loaded
lazily, on first use of that backend (a Kubernetes client import costs seconds).
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from nbtrain.errors import SpecError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from nbtrain.backends.base import Backend

__all__ = ["ENTRY_POINT_GROUP", "backend_class", "backend_names", "get_backend"]

ENTRY_POINT_GROUP = "nbtrain.backends"


@cache
def _entry_points() -> dict[str, EntryPoint]:
    # imported here: importlib.metadata is a third of what a supervisor process (importing this package for its
    # submodules) would load before starting its launchers
    from importlib.metadata import entry_points

    found = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    if not found:
        raise SpecError(
            f"no nbtrain backend is registered (entry-point group {ENTRY_POINT_GROUP!r} is empty): nbtrain's "
            "package metadata is missing; reinstall it with `pip install -e .` (from a clone) or `pip install nbtrain`."
        )
    return found


def backend_names() -> list[str]:
    """Names of every installed backend, sorted."""
    return sorted(_entry_points())


def backend_class(name: str) -> type[Backend]:
    """The class of backend ``name``; SpecError naming the installed ones when unknown or broken."""
    from nbtrain.backends.base import Backend

    points = _entry_points()
    if name not in points:
        raise SpecError(f"--backend: unknown backend {name!r}; choose one of: {', '.join(sorted(points))}.")
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
