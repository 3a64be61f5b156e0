"""requirements.txt: pinned versions, from this environment, of the distributions the job imports.

The modules come from every ``import`` in train.py (module level, functions and the cell alike) and,
when there is an objects.pkl, from the globals its pickles reference (read with :mod:`pickletools`,
never unpickled) plus cloudpickle. Each top-level module maps to its distribution(s) through
:func:`importlib.metadata.packages_distributions`. accelerate (the launcher) and torch are always
listed. Standard-library modules are skipped; modules that no installed distribution provides are
returned separately, so the README can say they must travel with the job.
"""

from __future__ import annotations

import ast
import functools
import io
import pickletools
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata

__all__ = ["imported_modules", "requirements"]

_ALWAYS = ("accelerate", "torch")


def imported_modules(source: str) -> set[str]:
    """Top-level names of the modules ``source`` imports (relative imports excluded)."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            roots.add(node.module.partition(".")[0])
    return roots


def pickled_modules(data: bytes) -> set[str]:
    """Top-level modules whose globals a stream of pickles refers to (best effort; nothing is loaded)."""
    roots: set[str] = set()
    stream = io.BytesIO(data)
    while stream.tell() < len(data):
        strings: list[str] = []
        try:
            for opcode, arg, _ in pickletools.genops(stream):
                if opcode.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8"):
                    strings.append(str(arg))
                elif opcode.name == "STACK_GLOBAL" and len(strings) >= 2:
                    roots.add(strings[-2].partition(".")[0])
                elif opcode.name in ("GLOBAL", "INST") and isinstance(arg, str):
                    roots.add(arg.split(" ", 1)[0].partition(".")[0])
        except (ValueError, EOFError):
            break
    return {r for r in roots if r and r.isidentifier()}


@functools.cache
def _distributions() -> Mapping[str, list[str]]:
    return metadata.packages_distributions()


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def requirements(modules: Iterable[str]) -> tuple[list[str], list[str]]:
    """``(["torch==2.13.0", ...], [modules no distribution provides])``, both sorted.

    Standard-library modules and ``__main__`` are skipped; accelerate and torch are always pinned
    when installed.
    """
    by_module = _distributions()
    pins: dict[str, str] = {}
    local: set[str] = set()
    stdlib = set(sys.stdlib_module_names) | {"__main__", "__future__"}
    for module in sorted(set(modules)):
        if module in stdlib or module.startswith("_nbtrain"):
            continue
        dists = by_module.get(module)
        if not dists:
            local.add(module)
            continue
        for dist in dists:
            version = _version(dist)
            if version is not None:
                pins[dist.lower()] = f"{dist}=={version}"
    for dist in _ALWAYS:
        version = _version(dist)
        if version is not None:
            pins.setdefault(dist.lower(), f"{dist}=={version}")
    return [pins[k] for k in sorted(pins)], sorted(local)
