"""The monitor's ``page`` replies come from seek-based page reads of the rank's log, never from a whole file."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nbtrain.logpage import read_page
from nbtrain.model import Batch, LogLine, LogPage
from nbtrain.view import RunView
from nbtrain.widgets.viewmodel import MAX_PAGE, page_reply, page_request

pytest.importorskip("anywidget")


class PagedBackend:
    """Serves ``log_page`` from real files (one per attempt); reading a whole log fails the test."""

    def __init__(self, logs: dict[int, Path]) -> None:
        self.logs = logs
        self.calls: list[tuple[int, int, int, int | None]] = []

    def log_page(self, handle: Any, rank: int, start: int, limit: int, *, attempt: int | None = None) -> LogPage:
        self.calls.append((rank, start, limit, attempt))
        return read_page(self.logs[attempt or 0], start, limit)

    def logs(self, *args: Any, **kwargs: Any) -> list[str]:
        raise AssertionError("the monitor read a whole log")


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
    backend = PagedBackend(logs)
    run = SimpleNamespace(id="paged-1", spec=SimpleNamespace(name="paged", nodes=1, procs=2),
                          record=SimpleNamespace(backend="local"), view=RunView(), backend=backend,
                          handle=object(), store=None, summary=lambda: "paged-1")
    widget = MonitorWidget(run)  # type: ignore[arg-type]
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
