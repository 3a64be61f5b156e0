"""Waiting for a run's tracking agent: its ledgers (``tracking.json``, ``tracking-<plug-in>.json``) say when MLflow or
a tracker plug-in has all of a run. On a busy machine the agent needs minutes; tests wait for the condition."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

__all__ = ["await_json"]


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
