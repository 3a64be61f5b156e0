"""The widget's pace: one batch message per flush, and a rank grid whose steps keep up with the charts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from nbtrain.events import Event, EventKind
from nbtrain.model import Batch, LogPage, RunSnapshot, RunState
from nbtrain.view import RankInfo, RunView

pytest.importorskip("anywidget")


class Clock:
    """Stands in for the widget module's ``time``: monotonic time moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now


class WatchedRun:
    """A running 1x2 run as the monitor sees it (``MonitoredRun``): a view the test folds events into."""

    id = "paced-1"

    def __init__(self) -> None:
        self.view = RunView()

    def ranks(self) -> Mapping[int, RankInfo]:
        return self.view.ranks

    def metric_series(self, rank: int = 0) -> Mapping[str, list[tuple[int, int, float]]]:
        return {name: list(points) for name, points in self.view.metrics.get(rank, {}).items()}

    def snapshot(self, *, refresh: bool = True) -> RunSnapshot:
        return RunSnapshot(run_id=self.id, name="paced", backend="local", state=RunState.RUNNING, attempt=0,
                           nodes=1, procs=2, world_size=2, created=0.0)

    def log_page(self, rank: int, start: int, limit: int, *, attempt: int | None = None) -> LogPage:
        return LogPage((), start, 0)

    def cursor(self) -> Any:
        raise AssertionError("the monitor is fed by its listener")

    def notice(self, message: str) -> None:
        raise AssertionError(message)

    def subscribe(self, listener: Any, *, lines: bool = True) -> None:
        raise AssertionError("Run.monitor subscribes the widget")

    def tracking_url(self) -> str | None:
        return None

    def cancel(self) -> None:
        raise AssertionError("nobody pressed Stop")

    def resume(self) -> Any:
        raise AssertionError("nobody pressed Resume")

    def summary(self) -> str:
        return self.id


def test_the_grid_step_follows_the_chart_within_half_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    from nbtrain.widgets import monitor

    clock = Clock()
    monkeypatch.setattr(monitor, "time", clock)
    run = WatchedRun()
    widget = monitor.MonitorWidget(run)
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(widget, "send", lambda message, buffers=None: sent.append(message))
    seq = 0

    def step(step: int, *, advance: float) -> None:
        nonlocal seq
        clock.now += advance
        seq += 1
        event = Event(EventKind.METRIC, "rank-0", seq, clock.now, 0, 0, {"step": step, "values": {"loss": 1 / (step + 1)}})
        run.view.apply(event)
        widget.on_batch(Batch((event,)))

    def grid_step() -> Any:
        return widget.ranks["nodes"][0]["ranks"][0][2]

    step(0, advance=1.0)  # first flush: the batch and the traits
    assert grid_step() == 0 and [m["points"]["loss"] for m in sent] == [[[0.0, 1.0]]]
    step(1, advance=0.1)  # within a flush period: nothing sent yet
    assert len(sent) == 1
    step(2, advance=0.15)  # a flush: the chart gets steps 1-2; the traits were synced 0.25 s ago
    assert len(sent) == 2 and grid_step() == 0
    step(3, advance=0.2)  # 0.45 s after the last sync, with events since: the grid catches up with the chart
    assert len(sent) == 3 and grid_step() == 3 and sent[-1]["points"]["loss"][-1][0] == 3.0
    clock.now += 0.5
    widget.on_batch(Batch())  # nothing new: no batch message
    assert len(sent) == 3
