"""NBTRAIN_MAX_STEPS: a rank ends its code, successfully, at its N-th distinct reported step."""

from __future__ import annotations

from typing import Any

import pytest

from nbtrain.runtime import metrics


class _Context:
    rank = 0

    def __init__(self) -> None:
        self.notices: list[str] = []

    def emit(self, kind: Any, **data: Any) -> None:
        self.notices.append(str(data.get("message")))


def test_the_budget_counts_distinct_steps_and_exits_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "_steps_seen", set())
    monkeypatch.setenv(metrics.ENV_MAX_STEPS, "3")
    ctx = _Context()
    # code that reports the batch step and then the epoch as a step: two distinct steps, however often reported
    for step in (5, 0, 5, 0, 5):
        metrics._count_step(ctx, step)  # type: ignore[arg-type]
    assert ctx.notices == []
    with pytest.raises(SystemExit) as stop:
        metrics._count_step(ctx, 6)  # type: ignore[arg-type]  # the third distinct step
    assert isinstance(stop.value, metrics.StepBudgetReached) and stop.value.code == 0
    assert ctx.notices == ["stopped after 3 step(s) (NBTRAIN_MAX_STEPS=3), at step 6"]


def test_no_budget_never_stops_and_keeps_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "_steps_seen", set())
    monkeypatch.delenv(metrics.ENV_MAX_STEPS, raising=False)
    for step in range(100):
        metrics._count_step(_Context(), step)  # type: ignore[arg-type]
    assert metrics._steps_seen == set()  # a long run without a budget holds no step set


@pytest.fixture()
def until_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "_steps_seen", set())
    monkeypatch.setattr(metrics, "_checkpointed", False)
    monkeypatch.setattr(metrics, "_ran_on", False)
    monkeypatch.setenv(metrics.ENV_MAX_STEPS, "3")
    monkeypatch.setenv(metrics.ENV_UNTIL_CHECKPOINT, "1")


def test_until_checkpoint_runs_past_the_budget_to_the_first_save_then_exits_zero(
        until_checkpoint: None, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _Context()
    monkeypatch.setattr(metrics.context, "current", lambda: ctx)
    for step in range(23):  # one epoch: the budget (3) is passed at step 2, the job saves at its end only
        metrics._count_step(ctx, step)  # type: ignore[arg-type]
    assert ctx.notices == ["3 step(s) reached at step 2 (NBTRAIN_MAX_STEPS=3) before any checkpoint: running on to "
                           "the first one"]
    with pytest.raises(SystemExit) as stop:
        metrics.checkpoint_done(22, saved=True)
    assert isinstance(stop.value, metrics.StepBudgetReached) and stop.value.code == 0
    assert ctx.notices[-1] == ("stopped at the checkpoint of step 22, the first after 3 step(s) "
                               "(NBTRAIN_MAX_STEPS_UNTIL_CHECKPOINT=1)")


def test_until_checkpoint_stops_at_the_budget_once_a_checkpoint_exists(until_checkpoint: None) -> None:
    ctx = _Context()
    metrics.checkpoint_done(0, saved=True)  # a job that saves every step: saved before the budget, goes on
    metrics._count_step(ctx, 0)  # type: ignore[arg-type]
    metrics._count_step(ctx, 1)  # type: ignore[arg-type]
    with pytest.raises(metrics.StepBudgetReached):
        metrics._count_step(ctx, 2)  # type: ignore[arg-type]


def test_a_resumed_attempt_stops_at_the_budget(until_checkpoint: None) -> None:
    ctx = _Context()
    metrics.checkpoint_done(22, saved=False)  # nbtrain.restore loaded step 22
    metrics._count_step(ctx, 23)  # type: ignore[arg-type]
    metrics._count_step(ctx, 24)  # type: ignore[arg-type]
    with pytest.raises(metrics.StepBudgetReached):
        metrics._count_step(ctx, 25)  # type: ignore[arg-type]
