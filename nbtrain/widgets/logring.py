"""The monitor's log lines in the kernel (pure): per rank, a ring of the newest lines kept as the bytes the
cursor read, and the order blocks arrived in (for the merged view). Nothing is decoded until it is shown.

A poll brings each rank's new lines as one :class:`~nbtrain.events.LineBlock`; keeping it costs an append,
whatever the number of lines in it. The full logs stay on disk and are paged from there.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from nbtrain.events import LineBlock

__all__ = ["LogRings", "RankRing", "blocks_of"]


class RankRing:
    """The newest lines of one rank's log: at least the last ``capacity`` lines seen (the whole blocks that
    hold them; a block of more than ``2 x capacity`` lines cut to its last ``capacity``), numbered as in the log.

    Memory: under ``3 x capacity`` lines of bytes (smaller blocks are kept as read: cutting each costs a copy,
    of at most ``capacity`` lines; a 512-rank gang brings a block per rank per poll, mostly cut).
    """

    __slots__ = ("blocks", "capacity", "held", "total")

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self.blocks: deque[LineBlock] = deque()
        self.held = 0  # lines in ``blocks``
        self.total = 0  # the number of the line after the newest one seen: the log's line count so far

    def add(self, block: LineBlock) -> LineBlock | None:
        """Keep ``block``'s lines; returns what was new in it (None when every line was seen already)."""
        seen = self.total - block.first
        if seen >= block.count:
            return None
        if seen > 0:  # an overlap (a cursor never sends one): keep the lines after what was seen
            block = _from_line(block, seen)
        self.total = block.first + block.count
        kept = _last_lines(block, self.capacity) if block.count > 2 * self.capacity else block
        self.blocks.append(kept)
        self.held += kept.count
        while self.held - self.blocks[0].count >= self.capacity:
            self.held -= self.blocks.popleft().count
        return block

    def lines(self, start: int, end: int) -> list[tuple[int, str]]:
        """The held lines numbered ``start <= n < end``, as ``(n, text)``, oldest first (decoded now)."""
        out: list[tuple[int, str]] = []
        for block in self.blocks:
            low, high = max(start, block.first), min(end, block.first + block.count)
            if low < high:
                texts = block.tail(block.first + block.count - low)[: high - low]
                out.extend(zip(range(low, high), texts, strict=True))
        return out

    def last(self, count: int) -> list[tuple[int, str]]:
        """The newest ``count`` held lines as ``(n, text)``, oldest first (decoded now)."""
        chunks: list[list[tuple[int, str]]] = []
        for block in reversed(self.blocks):
            if count <= 0:
                break
            take = min(count, block.count)
            end = block.first + block.count
            chunks.append(list(zip(range(end - take, end), block.tail(take), strict=True)))
            count -= take
        return [line for chunk in reversed(chunks) for line in chunk]


class LogRings:
    """Every rank's :class:`RankRing` for one attempt, the arrival order of their blocks (the merged view),
    and what arrived since the last :meth:`take` (each rank's first line not yet sent)."""

    def __init__(self, capacity: int, merged: int) -> None:
        self.capacity = capacity
        self.merged_limit = merged
        self.rings: dict[int, RankRing] = {}
        self.arrivals: deque[tuple[int, int, int]] = deque(maxlen=max(1, merged))  # (rank, first, count)
        self.pending: dict[int, int] = {}  # rank -> first line not sent yet; in arrival order (latest last)

    def add(self, block: LineBlock) -> None:
        """Keep one block of new lines."""
        ring = self.rings.get(block.rank)
        if ring is None:
            ring = self.rings[block.rank] = RankRing(self.capacity)
        new = ring.add(block)
        if new is None:
            return
        self.arrivals.append((new.rank, new.first, new.count))
        start = self.pending.pop(new.rank, new.first)
        self.pending[new.rank] = start  # re-inserted: this rank is now the latest to have written

    def counts(self) -> dict[int, int]:
        """Lines per rank so far."""
        return {rank: ring.total for rank, ring in self.rings.items()}

    def take(self, budget: int) -> tuple[list[list[Any]], dict[int, int]]:
        """What arrived since the previous take, at most ``budget`` lines: ``([[rank, n, text]], {rank: skipped})``.

        Each rank that wrote gets its newest lines, an equal share of ``budget`` (what a rank does not need goes
        to the ranks that wrote last; with more ranks than ``budget``, the latest writers get one line each); the
        older ones are counted as skipped. Ranks in arrival order.
        """
        starts = dict(self.pending)
        wanted = {rank: self.rings[rank].total - start for rank, start in starts.items()}
        self.pending.clear()
        order = list(wanted)
        share = budget // len(order) if order else 0
        grant = {rank: min(wanted[rank], share) for rank in order}
        if not share:  # more ranks wrote than lines fit: the newest line of each of the latest writers
            grant.update((rank, 1) for rank in order[-budget:] if budget > 0)
        left = budget - sum(grant.values())
        for rank in reversed(order):  # the remainder to the ranks that wrote last
            if left <= 0:
                break
            more = min(left, wanted[rank] - grant[rank])
            grant[rank] += more
            left -= more
        lines: list[list[Any]] = []  # as the message carries them
        skipped: dict[int, int] = {}
        for rank in order:
            ring = self.rings[rank]
            sent = [line for line in ring.last(grant[rank]) if line[0] >= starts[rank]] if grant[rank] else []
            lines.extend([rank, n, text] for n, text in sent)
            if wanted[rank] > len(sent):
                skipped[rank] = wanted[rank] - len(sent)
        return lines, skipped

    def recent(self, rank: int, count: int | None = None) -> list[tuple[int, str]]:
        """The newest ``count`` (default ``capacity``) held lines of ``rank`` as ``(n, text)``."""
        ring = self.rings.get(rank)
        return ring.last(ring.capacity if count is None else count) if ring else []

    def merged(self) -> list[tuple[int, int, str]]:
        """The newest lines of every rank in arrival order, at most ``merged`` of them."""
        chunks: list[list[tuple[int, int, str]]] = []
        need = self.merged_limit
        for rank, first, count in reversed(self.arrivals):
            if need <= 0:
                break
            got = self.rings[rank].lines(max(first, first + count - need), first + count)
            chunks.append([(rank, n, text) for n, text in got])
            need -= len(got)
        return [line for chunk in reversed(chunks) for line in chunk]


def blocks_of(lines: Iterable[tuple[int | None, int, str]], counts: dict[tuple[int, int], int]) -> list[LineBlock]:
    """Blocks for lines that came one by one as ``(rank, attempt, text)`` (a cursor without bulk reading),
    numbered on from ``counts`` (lines per (rank, attempt) so far, updated); lines without a rank are left out."""
    blocks: list[LineBlock] = []
    run: list[str] = []
    key: tuple[int, int] | None = None

    def close() -> None:
        if key is not None and run:
            rank, attempt = key
            first = counts.get(key, 0)
            data = "".join(text.replace("\n", " ") + "\n" for text in run).encode("utf-8", "replace")
            blocks.append(LineBlock(rank, attempt, first, len(run), data))
            counts[key] = first + len(run)

    for rank, attempt, text in lines:
        if rank is None:
            continue
        if (rank, attempt) != key:
            close()
            key, run = (rank, attempt), []
        run.append(text)
    close()
    return blocks


def _from_line(block: LineBlock, skip: int) -> LineBlock:
    """``block`` without its first ``skip`` lines."""
    position = 0
    for _ in range(skip):
        position = block.data.find(b"\n", position) + 1
    return LineBlock(block.rank, block.attempt, block.first + skip, block.count - skip, block.data[position:])


def _last_lines(block: LineBlock, count: int) -> LineBlock:
    """``block`` cut to its last ``count`` lines."""
    offset = block.tail_offset(count)
    return LineBlock(block.rank, block.attempt, block.first + block.count - count, count, block.data[offset:])
