"""A cursor over the event and log files a run keeps in the store (pure file reading, shared by backends).

The local backend's ranks write these files directly; the Kubernetes backend mirrors pod logs into
the same layout. Either way, reading them with one :class:`StoreCursor` gives every event and every
line exactly once, attempt by attempt.

Log lines are read in bulk: each poll reads each rank's new bytes as one :class:`LineBlock` (the bytes of
its complete lines, their count and the number of the first one; see :mod:`nbtrain.events`), and ``Batch.lines`` is a
:class:`LogLines` over those blocks. Iterating it gives :class:`~nbtrain.model.LogLine` objects as before
(decoded on demand); a bulk reader (the monitor) takes ``lines.blocks`` and decodes only what it shows,
so 100,000 lines a second cost a few byte copies and newline counts, not 100,000 Python objects.

A watcher polling a large gang ten times a second pays mostly per file (a ``pread`` each, ~1,000 files at 512
ranks), and most ranks are quiet most of the time: ``poll(skip_idle=True)`` reads a rank's file that had nothing
new last time only every :data:`IDLE_EVERY` polls (staggered over the files), and every file that had something
at every poll. Nothing is lost or repeated, only delayed; a plain ``poll()`` reads every file.
"""

from __future__ import annotations

import os
import re
import resource
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import overload

from nbtrain.contract import RunCursor
from nbtrain.events import Event, FileTail, LineBlock, parse_line
from nbtrain.model import Batch, LogLine
from nbtrain.store import Store

__all__ = ["IDLE_EVERY", "LogLines", "StoreCursor", "attempt_numbers", "follow_events", "tail_lines"]

MAX_FILE_BYTES = 4 * 1024 * 1024  # read from one file per poll
BYTES_PER_LINE = 200  # ``max_lines`` becomes a byte budget at this many bytes per line (a soft bound)
IDLE_EVERY = 4  # ``skip_idle``: a rank's file that had nothing new is read again at one poll in this many
_RANK_LOG = re.compile(r"rank-([0-9]{1,9})\.log")


def attempt_numbers(store: Store, run_id: str) -> list[int]:
    """The attempts of ``run_id`` that have a directory in ``store``, in order."""
    root = store.run_dir(run_id) / "attempts"
    if not root.is_dir():
        return []
    return sorted(int(p.name) for p in root.iterdir() if p.name.isdigit())


class LogLines(Sequence[LogLine]):
    """The log lines of one poll, held as :class:`LineBlock` s (``blocks``); a read-only sequence of
    :class:`~nbtrain.model.LogLine` in block order, decoded when iterated or indexed. Equal to any sequence
    of the same lines (``== ()`` when empty)."""

    __slots__ = ("_count", "blocks")

    def __init__(self, blocks: Sequence[LineBlock] = ()) -> None:
        self.blocks: tuple[LineBlock, ...] = tuple(blocks)
        self._count = sum(block.count for block in self.blocks)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[LogLine]:
        for block in self.blocks:
            for text in block.texts():
                yield LogLine(block.rank, text, block.attempt)

    @overload
    def __getitem__(self, index: int) -> LogLine: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[LogLine, ...]: ...

    def __getitem__(self, index: int | slice) -> LogLine | tuple[LogLine, ...]:
        if isinstance(index, slice):
            return tuple(self)[index]
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError("LogLines index out of range")
        for block in self.blocks:
            if index < block.count:
                return LogLine(block.rank, block.texts()[index], block.attempt)
            index -= block.count
        raise IndexError("LogLines index out of range")  # pragma: no cover - counts and blocks agree

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LogLines):
            return self.blocks == other.blocks or tuple(self) == tuple(other)
        if isinstance(other, (tuple, list)):
            return len(other) == self._count and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"LogLines({self._count} lines in {len(self.blocks)} blocks)"


def _open_budget() -> int:
    """How many log and event files this process's cursors may keep open together: a quarter of its
    descriptor limit (at most 4,096), so that watching runs never starves the rest of the process."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return 64
    if soft == resource.RLIM_INFINITY:
        return 4096
    return max(0, min(4096, soft // 4))


class _KeptOpen:
    """The process-wide count of descriptors cursors still may keep (shared by every cursor, thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._left: int | None = None

    def take(self) -> bool:
        """One more kept descriptor, if the budget allows."""
        with self._lock:
            if self._left is None:
                self._left = _open_budget()
            if self._left <= 0:
                return False
            self._left -= 1
            return True

    def give(self, count: int) -> None:
        """``count`` descriptors closed."""
        with self._lock:
            if self._left is not None:
                self._left += count


_KEPT_OPEN = _KeptOpen()


class StoreCursor:
    """Tails every ``events/*.jsonl`` and ``logs/rank-*.log`` of every attempt of one run, in attempt order.

    Files are kept open between polls while this process has descriptors to spare (see :func:`_open_budget`):
    a poll is then one directory listing per folder and one ``pread`` per file. :meth:`close` lets them go
    (so does dropping the cursor).
    """

    def __init__(self, store: Store, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        # by (attempt, file name); a log that is not a rank's own is remembered as None
        self.event_tails: dict[tuple[int, str], FileTail] = {}
        self.log_tails: dict[tuple[int, str], tuple[FileTail, int] | None] = {}
        # per folder: its last listing, and the tails of the files it names in reading order
        self._events: dict[int, tuple[list[str], list[FileTail]]] = {}
        self._logs: dict[int, tuple[list[str], list[tuple[FileTail, int]]]] = {}
        self._kept = 0  # descriptors taken from the process's budget
        self._idle: set[FileTail] = set()  # rank files whose last read had nothing new (``skip_idle``)
        self._ranks_own: set[FileTail] = set()  # the event files of ranks (the others are never skipped)
        self._polls = 0
        self._resume_at: dict[int, int] = {}  # per attempt: the log file a poll cut by its budget stopped at

    def poll(self, *, max_lines: int = 50_000, skip_idle: bool = False) -> Batch:
        """See :class:`nbtrain.backends.base.RunCursor`. ``max_lines=0`` skips logs.

        ``max_lines`` bounds a poll's reading softly: once ``max_lines`` x 200 bytes of lines are read, no further
        file is read (one file gives at most 4 MiB a poll); what is left is read by the next poll, which starts
        at the file this one stopped at (no rank waits for ever behind busier ones). ``lines`` is a :class:`LogLines`.

        ``skip_idle``: a rank's event or log file whose previous read had nothing new is read only at one poll in
        :data:`IDLE_EVERY` (what it has then comes at once; the supervisor's events are read every time). What a
        skipped file holds comes with a later poll, still exactly once; a poll without ``skip_idle`` reads all.
        """
        events: list[Event] = []
        blocks: list[LineBlock] = []
        budget = max_lines * BYTES_PER_LINE
        self._polls += 1
        turn = self._polls % IDLE_EVERY if skip_idle else -1
        idle = self._idle
        for attempt in attempt_numbers(self.store, self.run_id):
            root = self.store.attempt_dir(self.run_id, attempt)
            for i, tail in enumerate(self._event_files(attempt, root / "events")):
                if turn >= 0 and tail in idle and i % IDLE_EVERY != turn:
                    continue
                data, count = tail.read_block()
                if count:
                    idle.discard(tail)
                    for text in FileTail.texts(data):
                        event = parse_line(text)
                        if event is not None:
                            events.append(event)
                elif tail in self._ranks_own:
                    idle.add(tail)
            if max_lines <= 0:
                continue
            files = self._log_files(attempt, root / "logs")
            start = self._resume_at.pop(attempt, 0) % max(1, len(files))
            for i in (*range(start, len(files)), *range(start)):  # after a cut: from where the last poll stopped
                tail, rank = files[i]
                if budget <= 0:
                    self._resume_at[attempt] = i
                    break
                if turn >= 0 and tail in idle and i % IDLE_EVERY != turn:
                    continue
                first = tail.lines
                data, count = tail.read_block(MAX_FILE_BYTES)
                if count:
                    idle.discard(tail)
                    blocks.append(LineBlock(rank, attempt, first, count, data))
                    budget -= len(data)
                else:
                    idle.add(tail)
        # Batch.lines is annotated as a tuple in nbtrain/model.py; LogLines is the read-only sequence its
        # readers use (iteration, len, ==), holding bytes instead of one object per line.
        return Batch(tuple(events), LogLines(blocks))  # type: ignore[arg-type]

    def _event_files(self, attempt: int, folder: Path) -> list[FileTail]:
        """The tails of ``folder``'s event files in name order (the listing is processed again only when it changed)."""
        listing = _listing(folder)
        known = self._events.get(attempt)
        if known is not None and known[0] == listing:
            return known[1]
        tails = []
        for name in sorted(n for n in listing if n.endswith(".jsonl") and not n.startswith(".")):
            tail = self.event_tails.get((attempt, name))
            if tail is None:
                tail = self.event_tails[(attempt, name)] = self._tail(folder / name)
                if name.startswith("rank-"):
                    self._ranks_own.add(tail)
            tails.append(tail)
        self._events[attempt] = (listing, tails)
        return tails

    def _log_files(self, attempt: int, folder: Path) -> list[tuple[FileTail, int]]:
        """The tails of ``folder``'s rank logs and their ranks, in name order (as :meth:`_event_files`)."""
        listing = _listing(folder)
        known = self._logs.get(attempt)
        if known is not None and known[0] == listing:
            return known[1]
        entries = []
        for name in sorted(n for n in listing if n.endswith(".log") and not n.startswith(".")):
            key = (attempt, name)
            if key not in self.log_tails:
                match = _RANK_LOG.fullmatch(name)
                self.log_tails[key] = (self._tail(folder / name), int(match.group(1))) if match else None
            entry = self.log_tails[key]
            if entry is not None:
                entries.append(entry)
        self._logs[attempt] = (listing, entries)
        return entries

    def close(self) -> None:
        """Release the files kept open (the cursor keeps its positions and reopens them if polled again)."""
        tails = [*self.event_tails.values(), *(entry[0] for entry in self.log_tails.values() if entry is not None)]
        for tail in tails:
            tail.close()
            tail.keep_open = False
        _KEPT_OPEN.give(self._kept)
        self._kept = 0

    def _tail(self, path: Path) -> FileTail:
        keep = _KEPT_OPEN.take()
        self._kept += int(keep)
        return FileTail(path, keep_open=keep)

    def __del__(self) -> None:
        self.close()


def _listing(folder: Path) -> list[str]:
    """``os.listdir(folder)``; [] when it does not exist (yet)."""
    try:
        return os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []


def tail_lines(path: Path, count: int) -> list[str]:
    """The last ``count`` lines of ``path`` (reads at most its last 256 KiB; [] when missing)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 256 * 1024))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return []
    return text.splitlines()[-count:]


def follow_events(cursor: RunCursor, is_terminal: Callable[[], bool], *, follow: bool, poll_s: float) -> Iterator[Event]:
    """The :meth:`Backend.events` contract over any cursor: what exists now, or (``follow``) until terminal."""
    while True:
        terminal = is_terminal()
        batch = cursor.poll(max_lines=0)
        yield from batch.events
        if not follow or (terminal and not batch.events):
            return
        if not batch.events:
            time.sleep(poll_s)
