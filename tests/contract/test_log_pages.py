"""Paged logs on every backend: ``backend.log_page(handle, rank, start, limit)`` and ``Run.logs(rank, tail=N)``."""

from __future__ import annotations

import pytest
from helpers import BackendUnderTest

from nbtrain.model import RunState

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

PAGED_CELL = '''for i in range(100):
    print(f"n {i}", flush=True)
'''
NUMBERED = [f"n {i}" for i in range(100)]


def test_log_pages_from_the_start_the_middle_and_the_end(under_test: BackendUnderTest) -> None:
    run = under_test.submit(PAGED_CELL, name="paged", procs_per_node=2)
    assert run.wait(timeout=90, progress=False) is RunState.SUCCEEDED
    backend, handle = under_test.backend, under_test.handle(run.id)

    whole = list(backend.log_page(handle, 0, 0, 1000).lines)
    assert NUMBERED[0] in whole, f"rank 0's log has no {NUMBERED[0]!r}: {whole[:5]}"
    first = whole.index(NUMBERED[0])  # the runtime may print something before the cell's first line
    assert whole[first:first + 100] == NUMBERED

    page = backend.log_page(handle, 0, 0, 10)
    assert page.start == 0 and list(page.lines) == whole[:10]
    middle = backend.log_page(handle, 0, first + 40, 20)
    assert middle.start == first + 40 and list(middle.lines) == NUMBERED[40:60]
    last = backend.log_page(handle, 0, -5, 5)  # a negative start counts from the end
    assert list(last.lines) == whole[-5:] == NUMBERED[-5:]
    assert last.start == len(whole) - 5, f"start of the last page is {last.start}, not the absolute {len(whole) - 5}"
    past = backend.log_page(handle, 0, len(whole) + 10, 10)
    assert past.lines == ()
    assert backend.log_page(handle, 7, 0, 10).lines == ()  # a rank this 2-rank run does not have
    assert list(backend.log_page(handle, 1, -1, 1).lines) == ["n 99"]

    assert run.logs(0, tail=3).splitlines() == NUMBERED[-3:]
