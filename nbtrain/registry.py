"""Which backends are installed: the ``nbtrain.backends`` entry-point group, read once per process (bottom layer).

This module names backends; it never imports one (:func:`nbtrain.backends.backend_class` loads a backend's class
when it is used). JobSpec validation, the flags (``--backend`` choices and help), the nbtrain.toml mapping, the
dialog's data, the generated reference and ``nbtrain doctor`` all take the set of names from here, so a backend
installed later, as its own package, is accepted everywhere without an edit in nbtrain::

    [project.entry-points."nbtrain.backends"]
    team = "team_backend:TeamBackend"
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from nbtrain.errors import SpecError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

__all__ = ["ENTRY_POINT_GROUP", "backend_entry_points", "backend_names", "unknown_backend"]

ENTRY_POINT_GROUP = "nbtrain.backends"
#: Entry points whose object lives in nbtrain itself: the built-in backends (what checked-in generated files show).
_BUILTIN_PREFIX = "nbtrain."


@cache
def backend_entry_points() -> dict[str, EntryPoint]:
    """Every installed backend's entry point by name (read once per process); SpecError when there is none."""
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


def backend_names(*, builtin: bool = False) -> tuple[str, ...]:
    """Names of the installed backends, sorted; ``builtin``: only those nbtrain itself registers."""
    points = backend_entry_points()
    return tuple(sorted(n for n, ep in points.items() if not builtin or ep.value.startswith(_BUILTIN_PREFIX)))


def unknown_backend(name: str, flag: str = "--backend") -> str:
    """The message for a backend ``name`` that no installed package registers: the installed ones and the fix."""
    return (f"{flag}: unknown value {name!r}; the installed backends are: {', '.join(backend_names())}. Choose one "
            f"of them, or install the package that provides {name!r} (it registers it in the entry-point group "
            f"{ENTRY_POINT_GROUP!r}).")
