"""Whole-log search over paged reads (nbtrain.server.logsearch): matches, cursors, bounds."""

from __future__ import annotations

import pytest

from nbtrain.model import LogPage
from nbtrain.server.logsearch import search_logs

LOGS = {
    0: [f"rank 0 step {i}" for i in range(12_000)],
    1: ["warming up", "NaN loss at step 7", "done"],
    2: [],
}


def read(rank: int, first: int, count: int) -> LogPage:
    lines = LOGS[rank]
    return LogPage(tuple(lines[first:first + count]), first, len(lines))


def test_finds_lines_anywhere_in_every_rank_case_insensitively() -> None:
    page = search_logs(read, [0, 1, 2], "nan LOSS")
    assert page.matches == ((1, 1, "NaN loss at step 7"),) and page.next is None
    deep = search_logs(read, [0, 1, 2], "step 11999")
    assert deep.matches == ((0, 11_999, "rank 0 step 11999"),)  # past what any browser holds


def test_pages_with_a_cursor_until_every_line_was_read() -> None:
    seen: list[tuple[int, int, str]] = []
    start = None
    for _ in range(10):
        page = search_logs(read, [0, 1], "step 1", start=start, limit=400)
        seen += page.matches
        if page.next is None:
            break
        start = page.next
    expected = [(0, i, t) for i, t in enumerate(LOGS[0]) if "step 1" in t]
    assert seen == expected


def test_a_call_reads_at_most_its_budget_and_says_where_to_go_on() -> None:
    page = search_logs(read, [0, 1], "no such text", budget=5000)
    assert page.matches == () and page.scanned == 5000 and page.next == (0, 5000)
    rest = search_logs(read, [0, 1], "no such text", start=page.next, budget=100_000)
    assert rest.next is None and rest.scanned == 12_000 - 5000 + 3


def test_refuses_an_empty_text_or_a_cursor_outside_the_ranks() -> None:
    with pytest.raises(ValueError, match="empty"):
        search_logs(read, [0], "  ")
    with pytest.raises(ValueError, match="rank 5"):
        search_logs(read, [0, 1], "x", start=(5, 0))
