"""The submitting process's environment, recorded with each run for ``nbtrain env-diff`` (stdlib only).

At submit, after the gang has been started (so the scan overlaps the ranks' start-up), the run's directory gets
``submitter-env.json``: Python, torch and accelerate versions (from package metadata: nothing is imported), CUDA,
NCCL and CUDA driver API versions when torch is already imported here (left out otherwise), and the installed packages — the same fields the
ranks report in their ``env`` event (:func:`nbtrain.runtime.worker.environment_report`).
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path
from typing import Any

__all__ = ["FILE_NAME", "load", "process_environment", "record"]

FILE_NAME = "submitter-env.json"


def process_environment() -> dict[str, Any]:
    """This process's report in the ranks' form; imports nothing new (one package-metadata scan)."""
    from nbtrain.runtime.worker import _cuda_report, installed_packages

    packages = installed_packages()
    report: dict[str, Any] = {"python": platform.python_version(), "torch": packages.get("torch"),
                              "accelerate": packages.get("accelerate")}
    if "torch" in sys.modules:  # CUDA, NCCL, driver as torch sees them; unknown here otherwise (left out)
        report.update(_cuda_report())
    report["packages"] = packages
    return report


def record(run_dir: Path) -> None:
    """Write this process's report into ``run_dir`` (atomically). Raises OSError when it cannot be written."""
    from nbtrain.store import write_json_atomic

    write_json_atomic(Path(run_dir) / FILE_NAME, process_environment())


def load(run_dir: Path) -> dict[str, Any] | None:
    """The report recorded at submit, or None (a run submitted before nbtrain recorded it, an unreadable file)."""
    try:
        data = json.loads((Path(run_dir) / FILE_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
