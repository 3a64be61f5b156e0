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

from nbtrain.events import STEP_RANGE, EventKind
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


LOG_FORMS = ("nbtrain.log({\"loss\": 0.5}, step=3) (a mapping, as wandb.log, accelerator.log and "
             "mlflow.log_metrics take it) or nbtrain.log(step=3, loss=0.5) (keywords)")


def log(values: Mapping[str, Any] | None = None, /, step: int | None = None, total: int | None = None,
        **metrics: Any) -> None:
    """Report metric values at ``step`` from this rank; ``total`` (steps in the run) drives progress.

    Two forms, the same result: ``nbtrain.log({"loss": 0.5}, step=3)`` (a mapping first, the form
    ``wandb.log``, ``accelerator.log`` and ``mlflow.log_metrics`` use; ``step`` may follow positionally)
    and ``nbtrain.log(step=3, loss=0.5)`` (keywords). Both may be combined; a key given twice is an error.
    A call in neither form (a first argument that is not a mapping, a step that is not a whole number)
    raises TypeError naming both forms, inside a run and outside it.
    Values must be numbers (Python, numpy or 0-d tensors); others are skipped with one notice per key.
    Outside an nbtrain run (e.g. in the notebook itself) this does nothing.
    """
    merged = _merge_values(values, metrics)
    _check_step(step)
    ctx = context.current()
    if ctx is None:
        global _warned_outside
        if not _warned_outside:
            _warned_outside = True
            import warnings

            warnings.warn("nbtrain.log() called outside an nbtrain run: values are not recorded.", stacklevel=2)
        return
    record(merged, step, total)


def _merge_values(values: Mapping[str, Any] | None, metrics: Mapping[str, Any]) -> Mapping[str, Any]:
    """The values of one ``log`` call: the mapping, the keywords, or both (no key in both)."""
    if values is None:
        return metrics
    if not isinstance(values, Mapping):
        raise TypeError(f"nbtrain.log() takes a mapping of metric values first, not {type(values).__name__} "
                        f"{values!r}: call {LOG_FORMS}.")
    twice = sorted(set(map(str, values)) & set(metrics))
    if twice:
        raise TypeError(f"nbtrain.log() got metric(s) {', '.join(map(repr, twice))} both in the mapping and as "
                        f"keywords: give each once, as {LOG_FORMS}.")
    return {**values, **metrics} if metrics else values


def _check_step(step: Any) -> None:
    """Refuse a step that is not a whole number (e.g. the metrics passed where the step goes)."""
    if step is None:
        return
    try:
        whole = not isinstance(step, (str, bytes, Mapping)) and int(step) == step
    except (TypeError, ValueError, RuntimeError):
        whole = False
    if not whole:
        raise TypeError(f"nbtrain.log() step must be a whole number, not {type(step).__name__} {step!r}: "
                        f"call {LOG_FORMS}.")
    if not STEP_RANGE[0] <= int(step) <= STEP_RANGE[1]:
        raise ValueError(f"nbtrain.log() step {int(step)} is outside the steps MLflow and nbtrain's charts store "
                         f"(64-bit: {STEP_RANGE[0]} to {STEP_RANGE[1]}); count steps from 0 (a step number, not a "
                         "timestamp in nanoseconds or a hash).")


def record(values: Mapping[str, Any], step: int | None, total: int | None = None) -> None:
    """Turn ``values`` into one METRIC event of this rank (numbers only). Raises only StepBudgetReached and
    :class:`~nbtrain.runtime.stopping.StopAtStep` (both end the rank's code with exit code 0)."""
    ctx = context.current()
    if ctx is None:
        return
    if step is None:
        step = ctx.auto_step
    if not STEP_RANGE[0] <= int(step) <= STEP_RANGE[1]:  # Accelerate's tracker path: nbtrain.log refuses it
        ctx.emit(EventKind.NOTICE, message=f"metrics at step {int(step)} not recorded: a step must fit in 64 bits "
                                           f"({STEP_RANGE[0]} to {STEP_RANGE[1]}), as MLflow stores it")
        return
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
