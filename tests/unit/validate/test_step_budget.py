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
