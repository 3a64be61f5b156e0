"""Environment checks behind ``%nbtrain doctor`` (and later ``nbtrain doctor``): pure reporting, no fixes."""

from __future__ import annotations

import importlib.util
import platform
import shutil
import sys
from dataclasses import dataclass
from importlib import metadata

from nbtrain.store import Store

__all__ = ["Check", "render", "run_checks"]


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report."""

    name: str
    ok: bool
    detail: str
    fix: str = ""


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _backends_check() -> Check:
    """The installed backends (entry-point group ``nbtrain.backends``), those of other packages with their entry point."""
    from nbtrain.errors import SpecError
    from nbtrain.registry import ENTRY_POINT_GROUP, backend_entry_points, backend_names

    try:
        points, builtin = backend_entry_points(), backend_names(builtin=True)
    except SpecError as error:
        return Check("backends", False, str(error), "pip install -e . (from a clone) or pip install nbtrain")
    shown = [name if name in builtin else f"{name} ({points[name].value})" for name in sorted(points)]
    return Check("backends", True, f"{', '.join(shown)} (entry-point group {ENTRY_POINT_GROUP})")


def run_checks(store: Store | None = None) -> list[Check]:
    """Check Python, torch, accelerate, cloudpickle, the installed backends, devices, the launcher and the store."""
    from nbtrain.backends.local.gpus import detect_gpus

    python_ok = sys.version_info >= (3, 10)
    checks = [Check("python", python_ok, f"{platform.python_version()} at {sys.executable}",
                    "" if python_ok else "use Python 3.10 or newer")]
    for dist, fix in (("torch", "pip install torch"), ("accelerate", "pip install accelerate"),
                      ("cloudpickle", "pip install cloudpickle")):
        version = _version(dist)
        found = version is not None and importlib.util.find_spec(dist) is not None
        checks.append(Check(dist, found, version or "not installed", fix if not found else ""))
    checks.append(_backends_check())
    gpus = detect_gpus()
    smi = shutil.which("nvidia-smi")
    detail = (f"{gpus.count} GPU(s): " + ", ".join(gpus.names)) if gpus.count else (
        "no GPU visible" + ("" if smi else " (nvidia-smi not found)") + ": gangs run on CPU over gloo")
    checks.append(Check("devices", True, detail))
    store = store or Store()
    try:
        store.ensure_writable()
        checks.append(Check("store", True, f"{store.root} is writable"))
    except Exception as error:  # noqa: BLE001 - reported, not raised
        checks.append(Check("store", False, str(error), "set NBTRAIN_HOME to a writable directory"))
    return checks


def render(checks: list[Check]) -> str:
    """Aligned text report, one check per line, with fixes for failures."""
    width = max(len(c.name) for c in checks)
    lines = []
    for check in checks:
        mark = "ok  " if check.ok else "FAIL"
        line = f"{mark} {check.name.ljust(width)}  {check.detail}"
        if check.fix:
            line += f"  -> {check.fix}"
        lines.append(line)
    return "\n".join(lines)
