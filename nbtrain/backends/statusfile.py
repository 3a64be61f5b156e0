"""An attempt's ``status.json`` as a :class:`~nbtrain.model.RunStatus` (shared by the backends whose supervisor writes one).

The supervisor (local, Slurm) rewrites ``status.json`` atomically at each change: its state, the verdict, whether
the attempt is being retried, and while the gang hangs the ranks it judged stalled. Reading it is the same on every
such backend, so it lives here once:

- a ``retrying`` attempt reads as STARTING with "restarting after: <failure>" (the next attempt is on its way);
- a RUNNING attempt with ranks in ``stalled`` reads as STALLED, the ranks and the supervisor's detail with it
  (the event stream keeps RUNNING: a stall is how the run is doing now, not a step of its lifecycle);
- anything else is the state, times, failure and detail as written.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nbtrain.errors import StoreFileError
from nbtrain.model import Failure, RunState, RunStatus
from nbtrain.store import read_json

__all__ = ["read_status", "status_from"]


def read_status(path: Path) -> dict[str, Any] | None:
    """The content of a ``status.json``; None when it is missing, unreadable or not a status yet.

    StoreFileError naming the file when its ``state`` is none nbtrain writes (an edited or foreign file): what the
    attempt is doing cannot be told, and guessing would misreport the run.
    """
    try:
        data = read_json(path)
    except (OSError, ValueError):
        return None
    if not (isinstance(data, dict) and "state" in data):
        return None
    if data["state"] not in {s.value for s in RunState}:
        raise StoreFileError(f"{path}: state {data['state']!r} is not a run state nbtrain writes (one of "
                             f"{', '.join(s.value for s in RunState)}); the file was edited or damaged. Restore it, "
                             "or move its run directory out of the store.")
    return data


def status_from(data: Mapping[str, Any] | None, attempt: int) -> RunStatus | None:
    """What ``data`` (see :func:`read_status`) says of attempt ``attempt``; None when there is nothing (pure)."""
    if data is None:
        return None
    state = RunState(data["state"])
    failure = Failure.from_dict(data["failure"]) if data.get("failure") else None
    if data.get("retrying"):
        return RunStatus(RunState.STARTING, attempt, data.get("started"), None, failure,
                         detail=f"restarting after: {failure.summary() if failure else 'a failure'}")
    stalled = tuple(sorted({int(r) for r in data.get("stalled") or () if isinstance(r, int)}))
    if stalled and state is RunState.RUNNING:
        state = RunState.STALLED
    return RunStatus(state, attempt, data.get("started"), data.get("ended"), failure, str(data.get("detail") or ""),
                     stalled=stalled if state is RunState.STALLED else ())
