"""The rank's collective counter (nbtrain.runtime.progress): torch.distributed's collectives are counted and named;
DDP's forward and backward only say where the rank is, so a backward that is not DDP's (a second model) or an error
in it (an OOM) never makes the ranks' counts differ (what the hang watchdog reads as a desync)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nbtrain.runtime import progress


@pytest.fixture(autouse=True)
def fresh_counters() -> Iterator[None]:
    saved = (progress._issued, progress._inside, progress._failed_in)
    progress._issued, progress._inside, progress._failed_in = 0, None, None
    yield
    progress._issued, progress._inside, progress._failed_in = saved


def _boom() -> None:
    raise MemoryError("out of memory in backward")


def test_a_collective_is_counted_and_an_error_out_of_it_named() -> None:
    seen = []
    wrapped = progress._wrap("all_reduce", lambda: seen.append(progress.report()["in_collective"]))
    wrapped()
    assert seen == ["all_reduce"] and progress.report()["collectives"] == 1
    with pytest.raises(MemoryError):
        progress._wrap("all_reduce", _boom)()
    assert progress.report()["failed_in"] == "all_reduce" and progress.report()["collectives"] == 2


def test_ddps_backward_says_where_the_rank_is_but_is_neither_counted_nor_blamed() -> None:
    seen = []
    backward = progress._wrap(progress.DDP_BACKWARD, lambda: seen.append(progress.report()["in_collective"]),
                              counted=False)
    backward()
    assert seen == [progress.DDP_BACKWARD] and progress.report()["in_collective"] is None
    with pytest.raises(MemoryError):
        progress._wrap(progress.DDP_BACKWARD, _boom, counted=False)()
    report = progress.report()
    assert report["collectives"] == 0 and report["failed_in"] is None, report
