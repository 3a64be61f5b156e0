"""The import smoke test: does every import of train.py resolve in a fresh interpreter? (decisions pure)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence

from nbtrain.validate.ladder import Blame

__all__ = ["PLATFORM_MODULES", "blame_of_imports", "check_imports", "imports_of"]

#: Modules nbtrain's launch itself needs: their absence is the platform's problem, not the job's.
PLATFORM_MODULES = frozenset({"torch", "accelerate"})

_PROBE = """
import importlib, json, sys
results = {}
for module, names in json.loads(sys.argv[1]):
    try:
        imported = importlib.import_module(module)
        for name in names:
            if not hasattr(imported, name):
                importlib.import_module(module + "." + name)
        results[module] = None
    except BaseException as error:
        results[module] = type(error).__name__ + ": " + str(error)
print(json.dumps(results))
"""


def imports_of(source: str) -> list[tuple[str, list[str]]]:
    """Absolute imports of ``source`` in order: ``[(module, [names from it]), ...]`` (``import a.b`` -> ("a.b", []))."""
    found: dict[str, list[str]] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.setdefault(alias.name, [])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module != "__future__":
            names = found.setdefault(node.module, [])
            names.extend(a.name for a in node.names if a.name != "*" and a.name not in names)
    return list(found.items())


def check_imports(source: str, *, cwd: str | None = None, python: str | None = None,
                  timeout_s: float = 120.0) -> dict[str, str | None]:
    """Import every module of ``source`` in a fresh ``python`` (default this one) run in ``cwd`` (the job
    directory: its own modules import too): ``{module: None | error}``.

    Raises OSError when the interpreter cannot be started or its answer cannot be read (the platform).
    """
    wanted = imports_of(source)
    done = subprocess.run([python or sys.executable, "-c", _PROBE, json.dumps(wanted)], capture_output=True,
                          text=True, timeout=timeout_s, cwd=cwd)
    try:
        results = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise OSError(f"the import probe ({python or sys.executable}) exited {done.returncode} without an answer: "
                      f"{done.stderr.strip()[-500:]}") from None
    return {str(k): (None if v is None else str(v)) for k, v in results.items()}


def blame_of_imports(errors: Mapping[str, str], requirements: Sequence[str]) -> tuple[Blame, str]:
    """Whose fault the failed imports are, and one message naming each module, its error and the fix.

    torch or accelerate missing is the platform's; any other module is the job's: listed in requirements.txt but
    not installed (install it in the CI image), not listed (add it), or raising when imported.
    """
    listed = {r.split("==")[0].split(">=")[0].strip().lower().replace("_", "-") for r in requirements}
    parts = []
    platform = False
    for module, error in errors.items():
        top = module.split(".")[0]
        if top in PLATFORM_MODULES and error.startswith("ModuleNotFoundError"):
            platform = True
            parts.append(f"{module}: {error} (nbtrain's launch needs it: install torch and accelerate on this machine)")
        elif error.startswith("ModuleNotFoundError"):
            where = ("listed in requirements.txt but not installed here: pip install -r requirements.txt"
                     if top.lower().replace("_", "-") in listed else "not in requirements.txt: add its distribution")
            parts.append(f"{module}: {error} ({where})")
        else:
            parts.append(f"{module}: {error}")
    return (Blame.PLATFORM if platform else Blame.JOB), "; ".join(parts)
