"""The monitor's per-rank rings: the newest lines as bytes, bounded, numbered as in the log, decoded when shown."""

from __future__ import annotations

from nbtrain.events import LineBlock
from nbtrain.widgets.logring import LogRings, RankRing, blocks_of


def _block(rank: int, first: int, count: int, attempt: int = 0) -> LineBlock:
    data = "".join(f"r{rank} {i}\n" for i in range(first, first + count)).encode()
    return LineBlock(rank, attempt, first, count, data)


def _texts(rank: int, start: int, stop: int) -> list[tuple[int, str]]:
    return [(i, f"r{rank} {i}") for i in range(start, stop)]


def test_a_ring_keeps_the_newest_lines_of_many_blocks_in_bounded_memory() -> None:
    ring = RankRing(100)
    first = 0
    for count in [1, 7, 250, 3, 99, 40] * 50:
        ring.add(_block(0, first, count))
        first += count
        assert ring.held < 3 * 100 and sum(len(b.data) for b in ring.blocks) < 3 * 100 * len(b"r0 00000\n")
    assert ring.total == first
    assert ring.last(100) == _texts(0, first - 100, first)
    assert ring.lines(first - 5, first + 10) == _texts(0, first - 5, first)  # nothing past the newest
    assert ring.lines(0, 10) == []  # long gone from memory: paged from disk instead


def test_a_block_much_larger_than_the_ring_is_cut_to_its_last_lines_and_overlaps_are_dropped() -> None:
    ring = RankRing(10)
    assert ring.add(_block(2, 0, 20)) is not None and ring.held == 20  # up to 2 x the ring: kept as read
    ring = RankRing(10)
    new = ring.add(_block(2, 0, 10_000))
    assert new is not None and new.count == 10_000  # all of it was new (the line count says so) ...
    assert ring.held == 10 and ring.last(10) == _texts(2, 9_990, 10_000)  # ... but only the last 10 are kept
    assert ring.add(_block(2, 9_995, 5)) is None  # seen already
    again = ring.add(_block(2, 9_998, 4))  # two seen, two new
    assert again is not None and (again.first, again.count) == (10_000, 2) and ring.total == 10_002
    assert ring.last(3) == _texts(2, 9_999, 10_002)
    ring.add(_block(2, 20_000, 1))  # lines the cursor read before the monitor existed: numbers jump
    assert ring.total == 20_001 and ring.last(2) == [(10_001, "r2 10001"), (20_000, "r2 20000")]


def test_a_take_shares_its_budget_between_the_ranks_that_wrote_and_counts_the_rest() -> None:
    logs = LogRings(capacity=500, merged=1000)
    logs.add(_block(0, 0, 300))
    logs.add(_block(1, 0, 5))
    logs.add(_block(2, 0, 300))
    lines, skipped = logs.take(100)
    per_rank = {r: [n for rank, n, _ in lines if rank == r] for r in (0, 1, 2)}
    assert per_rank[1] == list(range(5))  # a quiet rank gets all it wrote
    assert per_rank[0] == list(range(267, 300))  # the others their newest, an equal share ...
    assert per_rank[2] == list(range(238, 300))  # ... and what rank 1 did not need goes to the latest writer
    assert len(lines) == 100 and skipped == {0: 267, 2: 238}
    assert all(text == f"r{rank} {n}" for rank, n, text in lines)
    assert logs.take(100) == ([], {})  # nothing new
    logs.add(_block(1, 5, 2))
    assert logs.take(100) == ([[1, 5, "r1 5"], [1, 6, "r1 6"]], {})


def test_many_ranks_share_a_small_budget() -> None:
    logs = LogRings(capacity=50, merged=100)
    for rank in range(512):
        logs.add(_block(rank, 0, 20))
    lines, skipped = logs.take(400)
    assert len(lines) == 400 and len({rank for rank, _, _ in lines}) == 400  # one line each from the latest 400
    assert sum(skipped.values()) == 512 * 20 - 400
    assert logs.counts() == dict.fromkeys(range(512), 20)


def test_the_merged_view_follows_arrival_order() -> None:
    logs = LogRings(capacity=100, merged=6)
    logs.add(_block(0, 0, 3))
    logs.add(_block(1, 0, 2))
    logs.add(_block(0, 3, 2))
    assert logs.merged() == [(0, 1, "r0 1"), (0, 2, "r0 2"), (1, 0, "r1 0"), (1, 1, "r1 1"), (0, 3, "r0 3"),
                             (0, 4, "r0 4")]  # the newest 6 of 7
    logs.add(_block(1, 2, 4))
    assert [(r, n) for r, n, _ in logs.merged()] == [(0, 3), (0, 4), (1, 2), (1, 3), (1, 4), (1, 5)]
    assert logs.recent(0) == _texts(0, 0, 5) and logs.recent(9) == []


def test_lines_that_came_one_by_one_become_blocks_numbered_on() -> None:
    counts = {(0, 0): 10}
    blocks = blocks_of([(0, 0, "a"), (0, 0, "b"), (None, 0, "launcher"), (1, 0, "c"), (0, 1, "new attempt")], counts)
    assert [(b.rank, b.attempt, b.first, b.count, b.texts()) for b in blocks] == [
        (0, 0, 10, 2, ["a", "b"]), (1, 0, 0, 1, ["c"]), (0, 1, 0, 1, ["new attempt"])]
    assert counts == {(0, 0): 12, (1, 0): 1, (0, 1): 1}
