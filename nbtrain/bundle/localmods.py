"""Local modules the captured code imports (``from mylib import f`` with ``mylib.py`` next to the notebook).

An import statement is enough where the module is installed, but a module that lives in the notebook's directory
exists only there: a pod (or any machine with the bundle alone) cannot import it. Such modules travel in the bundle,
as source, under ``modules/`` (the worker puts that directory on ``sys.path``), with the local modules they import in
turn. "Local" means: found in a file under ``root`` (the kernel's working directory, the notebook's), not part of an
installed distribution (``pip install -e .`` of the project counts as installed: the image is expected to have it),
not under the interpreter's prefix, and not nbtrain itself. Only ``.py`` files are shipped: a local C extension
cannot be built here for the image.
"""

from __future__ import annotations

import ast
import importlib.metadata
import sys
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["MODULES_DIR", "local_module_files"]

MODULES_DIR = "modules"


def _installed() -> set[str]:
    try:
        return set(importlib.metadata.packages_distributions())
    except Exception:  # noqa: BLE001 - broken metadata of some distribution: judge by path alone
        return set()


def _prefixes() -> list[Path]:
    return [Path(p).resolve() for p in {sys.prefix, sys.base_prefix, sys.exec_prefix} if p]


def _top_module(value: Any) -> str | None:
    """The top-level module name ``value`` (a module, or an object imported from one) comes from."""
    name = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
    if not isinstance(name, str) and not isinstance(value, types.ModuleType):
        name = getattr(type(value), "__module__", None)
    if not isinstance(name, str) or not name or name == "__main__":
        return None
    return name.split(".")[0]


def _local_root(top: str, root: Path, installed: set[str], prefixes: list[Path]) -> Path | None:
    """The file (a module) or directory (a package) of local module ``top``, else None."""
    if top == "nbtrain" or top in installed or top in sys.stdlib_module_names:
        return None
    module = sys.modules.get(top)
    file = getattr(module, "__file__", None)
    if not isinstance(file, str) or not file.endswith(".py"):
        return None
    path = Path(file).resolve()
    if not path.is_relative_to(root) or any(path.is_relative_to(p) for p in prefixes if root != p):
        return None
    where = path.parent if getattr(module, "__path__", None) is not None else path
    importable_from = {root} | {Path(p or ".").resolve() for p in sys.path if isinstance(p, str)}
    return where if where.parent in importable_from else None  # a module the notebook imports, not one inside a package


def _imported_names(source: bytes) -> set[str]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def local_module_files(values: Iterable[Any], root: Path | None = None) -> dict[str, bytes]:
    """``{"modules/<path>": source}`` for the local modules ``values`` come from, and the local modules those import.

    ``values``: the captured modules and objects (imported names, pickled objects). ``root``: where local modules
    live (default: the working directory).
    """
    base = (root or Path.cwd()).resolve()
    installed, prefixes = _installed(), _prefixes()
    todo = [top for top in (_top_module(v) for v in values) if top]
    seen: set[str] = set()
    files: dict[str, bytes] = {}
    while todo:
        top = todo.pop()
        if top in seen:
            continue
        seen.add(top)
        where = _local_root(top, base, installed, prefixes)
        if where is None:
            continue
        found = sorted(p for p in where.rglob("*.py") if "__pycache__" not in p.parts) if where.is_dir() else [where]
        for path in found:
            rel = path.relative_to(where.parent).as_posix()
            data = path.read_bytes()
            files[f"{MODULES_DIR}/{rel}"] = data
            todo += sorted(_imported_names(data) - seen)
    return files
