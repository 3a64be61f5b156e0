"""Waiting for a run's tracking agent: its ledgers (``tracking.json``, ``tracking-<plug-in>.json``) say when MLflow or
a tracker plug-in has all of a run. On a busy machine the agent needs minutes; tests wait for the condition."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

__all__ = ["await_agent_exit", "await_json"]


def await_json(path: Path, key: str, expected: Any, timeout: float = 240) -> dict[str, Any]:
    """``path``'s JSON once its ``key`` is ``expected``; fails with the agent's log after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
        if data.get(key) == expected:
            return dict(data)
        log = path.parent / "tracking-agent.log"
        assert time.monotonic() < deadline, f"{path}: {key} is {data.get(key)!r}, not {expected!r}; agent log:\n" + (
            log.read_text() if log.is_file() else "(none)")
        time.sleep(0.5)


def await_agent_exit(run_id: str, timeout: float = 60) -> None:
    """Once its ledgers are final the run's tracking agent exits: wait for that (an agent that just logged
    "exiting" may take seconds to shut its interpreter down on a busy machine, past the ``home`` fixture's check)."""
    from procs import pids_with_env

    deadline = time.monotonic() + timeout
    while pids := pids_with_env("NBTRAIN_TRACKING_OF", {run_id}):
        assert time.monotonic() < deadline, f"the tracking agent of {run_id} (pid {pids}) did not exit in {timeout} s"
        time.sleep(0.2)
