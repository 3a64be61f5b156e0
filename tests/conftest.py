"""Shared fixtures: an isolated run store per test, and a guard that no gang process outlives a test."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest


def _marked_pids(marker: str) -> list[int]:
    """PIDs whose environment contains ``marker=`` (independent of nbtrain's own process finder)."""
    needle = f"\0{marker}=".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in b"\0" + (entry / "environ").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
                if state not in ("Z", "X"):
                    pids.append(int(entry.name))
        except (OSError, IndexError):
            continue
    return pids


def gang_survivors() -> list[int]:
    """Every live process that belongs to some nbtrain gang or supervisor."""
    return sorted(set(_marked_pids("NBTRAIN_RUN_ID")) | set(_marked_pids("NBTRAIN_SUPERVISOR_OF")))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh NBTRAIN_HOME; after the test, fail if any gang process is left (and kill it)."""
    root = tmp_path / "nbtrain-home"
    monkeypatch.setenv("NBTRAIN_HOME", str(root))
    yield root
    leftovers = gang_survivors()
    for pid in leftovers:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    assert not leftovers, f"processes left behind by the test: {leftovers}"


@pytest.fixture
def survivors() -> object:
    """``survivors()`` lists live gang/supervisor processes (tests assert it is empty)."""
    return gang_survivors
