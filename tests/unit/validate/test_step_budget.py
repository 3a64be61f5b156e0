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
    monkeypatch.setattr(metrics, "_steps_counted", 0)
    monkeypatch.setattr(metrics, "_last_counted", None)
    monkeypatch.setenv(metrics.ENV_MAX_STEPS, "2")
    ctx = _Context()
    metrics._count_step(ctx, 5)  # type: ignore[arg-type]
    metrics._count_step(ctx, 5)  # type: ignore[arg-type]  # a second report of the same step
    with pytest.raises(SystemExit) as stop:
        metrics._count_step(ctx, 6)  # type: ignore[arg-type]
    assert isinstance(stop.value, metrics.StepBudgetReached) and stop.value.code == 0
    assert ctx.notices == ["stopped after 2 step(s) (NBTRAIN_MAX_STEPS=2), at step 6"]


def test_no_budget_never_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "_steps_counted", 0)
    monkeypatch.setattr(metrics, "_last_counted", None)
    monkeypatch.delenv(metrics.ENV_MAX_STEPS, raising=False)
    for step in range(100):
        metrics._count_step(_Context(), step)  # type: ignore[arg-type]
