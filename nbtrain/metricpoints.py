"""The points of a METRIC event, read defensively (pure): an event file is data, and a bad point is skipped.

``nbtrain.log`` refuses a step outside :data:`nbtrain.events.STEP_RANGE` (what MLflow and the charts store), but a
worker of another version or a hand-edited line may still hold one: every reader (the run view behind ``/metrics``
and ``nbtrain submit --wait``, the monitor's charts, the MLflow forwarder) takes its points through here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nbtrain.events import STEP_RANGE

__all__ = ["event_step", "metric_values"]


def event_step(data: Mapping[str, Any]) -> int | None:
    """The ``step`` in an event's ``data`` when it is a whole number in :data:`STEP_RANGE`, else None.

    ``nbtrain.log`` refuses other steps, but an event file is data (a worker of another version, a hand-written
    line): readers skip a point whose step is None rather than fail on it.
    """
    step = data.get("step")
    if isinstance(step, float) and step.is_integer() and abs(step) < 2.0**63:
        step = int(step)
    if isinstance(step, bool) or not isinstance(step, int) or not STEP_RANGE[0] <= step <= STEP_RANGE[1]:
        return None
    return step


def metric_values(data: Mapping[str, Any]) -> list[tuple[str, float]]:
    """``(name, value)`` of a METRIC event's ``data["values"]`` that are numbers (others skipped, as
    :func:`event_step` skips a bad step: a reader never fails on a stored point)."""
    values = data.get("values")
    out = []
    for name, value in values.items() if isinstance(values, Mapping) else ():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append((str(name), float(value)))
    return out
