"""The monitor's ``page`` replies come from seek-based page reads of the rank's log, never from a whole file."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from nbtrain.logpage import read_page
from nbtrain.model import Batch, LogLine, LogPage, RunSnapshot, RunState
from nbtrain.spec import JobSpec
from nbtrain.view import RankInfo, RunView
from nbtrain.widgets.viewmodel import MAX_PAGE, page_reply, page_request

pytest.importorskip("anywidget")


class PagedRun:
    """A run as the monitor sees it (``MonitoredRun``), serving pages from real files (one per attempt).

    It has no whole-log read at all, and it records every page the monitor asks for.
    """

    def __init__(self, logs: dict[int, Path]) -> None:
        self.logs = logs
        self.calls: list[tuple[int, int, int, int | None]] = []
        self.id = "paged-1"
        self.spec = JobSpec(name="paged", procs_per_node=2)
        self.notebook: str | None = None
        self.view = RunView()
        self.notices: list[str] = []

    def ranks(self) -> Mapping[int, RankInfo]:
        return self.view.ranks

    def metric_series(self, rank: int = 0) -> Mapping[str, list[tuple[int, int, float]]]:
        return {name: list(points) for name, points in self.view.metrics.get(rank, {}).items()}

    def snapshot(self, *, refresh: bool = True) -> RunSnapshot:
        return RunSnapshot(run_id=self.id, name="paged", backend="local", state=RunState.RUNNING, attempt=0,
                           nodes=1, procs=2, world_size=2, created=0.0, notices=tuple(self.notices))

    def log_page(self, rank: int, start: int, limit: int, *, attempt: int | None = None) -> LogPage:
        self.calls.append((rank, start, limit, attempt))
        return read_page(self.logs[attempt or 0], start, limit)

    def cursor(self) -> Any:
        raise AssertionError("the monitor is fed by its listener, it opens no cursor")

    def notice(self, message: str) -> None:
        self.notices.append(message)

    def subscribe(self, listener: Callable[[Batch], None], *, lines: bool = True) -> None:
        raise AssertionError("Run.monitor subscribes the widget, the widget does not")

    def tracking_url(self) -> str | None:
        return None

    def cancel(self) -> None:
        raise AssertionError("nobody pressed Stop")

    def resume(self) -> Any:
        raise RuntimeError("no checkpoint to resume from")

    def summary(self) -> str:
        return self.id


def test_page_request_and_reply() -> None:
    assert page_request(2500, 1000) == (1500, 1000)
    assert page_request(300, 1000) == (0, 300)
    assert page_request(10, 0) == (9, 1)  # at least one line
    assert page_request(50_000, 99_999) == (50_000 - MAX_PAGE, MAX_PAGE)
    assert page_request(-5, 10) == (0, 0)
    assert page_reply(1, LogPage(("a", "b"), 7, 9)) == {"type": "page", "rank": 1, "start": 7, "lines": ["a", "b"],
                                                        "eof": False}
    assert page_reply(1, LogPage(("a",), 0, 9))["eof"] is True


def test_monitor_pages_read_by_line_number_from_the_attempt_shown(tmp_path: Path) -> None:
    from nbtrain.widgets.monitor import MonitorWidget

    logs = {}
    for attempt in (0, 1):
        logs[attempt] = tmp_path / f"attempt-{attempt}.log"
        logs[attempt].write_text("".join(f"a{attempt} line {i}\n" for i in range(3000)) + "half a li")
    run = backend = PagedRun(logs)
    widget = MonitorWidget(run)
    reply = widget._page(0, 2500, 1000)
    assert reply["start"] == 1500 and reply["lines"] == [f"a0 line {i}" for i in range(1500, 2500)]
    assert not reply["eof"] and backend.calls[-1] == (0, 1500, 1000, 0)
    # once the model shows attempt 1's lines, pages are indices into attempt 1's log
    widget._model.ingest(Batch(lines=(LogLine(0, "a1 line 0", attempt=1),)))
    reply = widget._page(0, 3, 500)
    assert reply == {"type": "page", "rank": 0, "start": 0, "lines": ["a1 line 0", "a1 line 1", "a1 line 2"],
                     "eof": True}
    assert backend.calls[-1] == (0, 0, 3, 1)
    assert widget._page(0, 5000, 1000)["lines"] == []  # nothing is numbered that high
    tail = widget._page(0, 3000, 1000)  # the newest page: the half-written line is not shown
    assert tail["lines"][-1] == "a1 line 2999" and len(tail["lines"]) == 1000


def test_a_failed_resume_becomes_a_notice_in_the_header(tmp_path: Path) -> None:
    from nbtrain.widgets.monitor import MonitorWidget

    run = PagedRun({0: tmp_path / "none.log"})
    widget = MonitorWidget(run)
    widget._resume()  # what the Resume button's thread runs
    assert run.notices == ["resume failed: no checkpoint to resume from"]
    assert widget.header["notices"] == run.notices and widget.header["state"] == "running"
