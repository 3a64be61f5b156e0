"""Worker-side metric reporting: ``nbtrain.log`` and the hook on ``Accelerator.log`` (stdlib only).

Step budget (``NBTRAIN_MAX_STEPS=N``, off when unset or 0): a rank that has reported metrics at N distinct
steps in this attempt ends its training code there, successfully (SystemExit(0) out of the N-th report, so
the rank exits 0 and the run succeeds). ``nbtrain validate`` uses it to run a job "for N steps". Every rank
counts its own reports: jobs that report on every rank (``accelerator.log`` does, through nbtrain's hook)
stop in step; code that reports from rank 0 alone would leave the other ranks waiting in their next
collective.

Until the first checkpoint (``NBTRAIN_MAX_STEPS_UNTIL_CHECKPOINT=1`` beside the budget): a rank that reaches the
budget before this process saved or restored a checkpoint runs on, and ends (exit code 0, as above) right after
its next ``nbtrain.save_checkpoint`` has committed. ``nbtrain validate``'s distributed rung uses it so that a job
checkpointing once per epoch leaves a checkpoint to check and resume from; a resumed attempt (it restored one)
stops at the budget. Every rank saves at the same step (the save is collective), so they end together.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Mapping
from typing import Any

from nbtrain.events import STEP_RANGE, EventKind
from nbtrain.runtime import context, progress, stopping

ENV_MAX_STEPS = "NBTRAIN_MAX_STEPS"
ENV_UNTIL_CHECKPOINT = "NBTRAIN_MAX_STEPS_UNTIL_CHECKPOINT"

_warned_outside = False
_skipped_keys: set[str] = set()
_steps_seen: set[int] = set()  # the distinct steps reported in this process (kept only under a step budget)
_checkpointed = False  # this process saved or restored a checkpoint (nbtrain.runtime.checkpoint says so)
_ran_on = False  # the budget was reached before any checkpoint, and the rank runs on to its first


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


def _budget() -> int:
    try:
        return int(os.environ.get(ENV_MAX_STEPS, "0") or 0)
    except ValueError:
        return 0


def _count_step(ctx: context.WorkerContext, step: int) -> None:
    """Count ``step`` towards NBTRAIN_MAX_STEPS; raise StepBudgetReached at the budget (see module docstring)."""
    global _ran_on
    budget = _budget()
    if budget <= 0 or step in _steps_seen:
        return
    _steps_seen.add(step)
    if len(_steps_seen) >= budget:
        if os.environ.get(ENV_UNTIL_CHECKPOINT) == "1" and not _checkpointed:
            if not _ran_on and ctx.rank == 0:
                ctx.emit(EventKind.NOTICE, message=f"{budget} step(s) reached at step {step} ({ENV_MAX_STEPS}="
                                                   f"{budget}) before any checkpoint: running on to the first one")
            _ran_on = True
            return
        if ctx.rank == 0:
            ctx.emit(EventKind.NOTICE, message=f"stopped after {budget} step(s) ({ENV_MAX_STEPS}={budget}), "
                                               f"at step {step}")
        raise StepBudgetReached(budget)


def checkpoint_done(step: int, *, saved: bool) -> None:
    """This process committed (``saved``) or restored the checkpoint of ``step``. Raises StepBudgetReached after the
    first save of a rank that ran on past its budget to reach it (see module docstring)."""
    global _checkpointed
    _checkpointed = True
    if saved and _ran_on:
        ctx = context.current()
        if ctx is not None and ctx.rank == 0:
            ctx.emit(EventKind.NOTICE, message=f"stopped at the checkpoint of step {step}, the first after "
                                               f"{_budget()} step(s) ({ENV_UNTIL_CHECKPOINT}=1)")
        raise StepBudgetReached(_budget())


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
