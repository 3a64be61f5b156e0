"""Worker-side metric reporting: ``nbtrain.log`` and the hook on ``Accelerator.log`` (stdlib only).

Step budget (``NBTRAIN_MAX_STEPS=N``, off when unset or 0): a rank that has reported metrics at N distinct
steps in this attempt ends its training code there, successfully (SystemExit(0) out of the N-th report, so
the rank exits 0 and the run succeeds). ``nbtrain validate`` uses it to run a job "for N steps". Every rank
counts its own reports: jobs that report on every rank (``accelerator.log`` does, through nbtrain's hook)
stop in step; code that reports from rank 0 alone would leave the other ranks waiting in their next
collective.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Mapping
from typing import Any

from nbtrain.events import EventKind
from nbtrain.runtime import context, progress, stopping

ENV_MAX_STEPS = "NBTRAIN_MAX_STEPS"

_warned_outside = False
_skipped_keys: set[str] = set()
_steps_seen: set[int] = set()  # the distinct steps reported in this process (kept only under a step budget)


class StepBudgetReached(SystemExit):
    """Raised out of the N-th step's report when NBTRAIN_MAX_STEPS=N: ends the rank's code with exit code 0."""

    def __init__(self, steps: int) -> None:
        super().__init__(0)
        self.steps = steps


def log(step: int | None = None, total: int | None = None, **values: Any) -> None:
    """Report metric ``values`` at ``step`` from this rank; ``total`` (steps in the run) drives progress.

    Values must be numbers (Python, numpy or 0-d tensors); others are skipped with one notice per key.
    Outside an nbtrain run (e.g. in the notebook itself) this does nothing.
    """
    ctx = context.current()
    if ctx is None:
        global _warned_outside
        if not _warned_outside:
            _warned_outside = True
            import warnings

            warnings.warn("nbtrain.log() called outside an nbtrain run: values are not recorded.", stacklevel=2)
        return
    record(values, step, total)


def record(values: Mapping[str, Any], step: int | None, total: int | None = None) -> None:
    """Turn ``values`` into one METRIC event of this rank (numbers only). Raises only StepBudgetReached and
    :class:`~nbtrain.runtime.stopping.StopAtStep` (both end the rank's code with exit code 0)."""
    ctx = context.current()
    if ctx is None:
        return
    if step is None:
        step = ctx.auto_step
    ctx.auto_step = int(step) + 1
    clean: dict[str, float] = {}
    for key, value in values.items():
        number = _as_float(value)
        if number is None:
            if key not in _skipped_keys:
                _skipped_keys.add(key)
                ctx.emit(EventKind.NOTICE, message=f"metric {key!r} is a {type(value).__name__}, not a number: not recorded")
            continue
        clean[str(key)] = number
    if not clean:
        return
    ctx.last_step = int(step)
    progress.advance()
    data: dict[str, Any] = {"step": int(step), "values": clean}
    if total is not None:
        data["total"] = int(total)
    ctx.emit(EventKind.METRIC, **data)
    _count_step(ctx, int(step))
    try:
        stopping.at_step(int(step))  # a warm run's Stop ends the ranks here, between two steps
    except stopping.StopAtStep:
        if ctx.rank == 0:
            ctx.emit(EventKind.NOTICE, message=f"stopped at step {step} (Stop: at a step boundary)")
        raise


def _count_step(ctx: context.WorkerContext, step: int) -> None:
    """Count ``step`` towards NBTRAIN_MAX_STEPS; raise StepBudgetReached at the budget (see module docstring)."""
    try:
        budget = int(os.environ.get(ENV_MAX_STEPS, "0") or 0)
    except ValueError:
        budget = 0
    if budget <= 0 or step in _steps_seen:
        return
    _steps_seen.add(step)
    if len(_steps_seen) >= budget:
        if ctx.rank == 0:
            ctx.emit(EventKind.NOTICE, message=f"stopped after {budget} step(s) ({ENV_MAX_STEPS}={budget}), "
                                               f"at step {step}")
        raise StepBudgetReached(budget)


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, numbers.Real):
        return float(value)
    item = getattr(value, "item", None)
    numel = getattr(value, "numel", None) or getattr(value, "size", None)
    if callable(item):
        try:
            if callable(numel) and numel() != 1:
                return None
            result = item()
        except (ValueError, RuntimeError, TypeError):
            return None
        if isinstance(result, numbers.Real):
            return float(result)
    return None
