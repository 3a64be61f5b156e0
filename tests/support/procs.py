"""Process inspection shared by the test suites (plain functions; tests/conftest.py puts this folder on sys.path)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["pids_with_env"]


def pids_with_env(marker: str, values: set[str] | None = None) -> list[int]:
    """PIDs whose environment has ``marker=`` (with one of ``values`` when given); independent of nbtrain's code."""
    needle = f"\0{marker}=".encode()
    wanted = None if values is None else {f"\0{marker}={v}\0".encode() for v in values}
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = b"\0" + (entry / "environ").read_bytes() + b"\0"
            if needle in environ and (wanted is None or any(w in environ for w in wanted)):
                state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
                if state not in ("Z", "X"):
                    pids.append(int(entry.name))
        except (OSError, IndexError):
            continue
    return sorted(pids)
