"""Paged reads of one append-only log file by seeking, never by reading it whole (pure file reading, stdlib only).

:func:`read_page` is what every backend's ``log_page`` calls on the store's ``rank-<r>.log``; the REST logs
endpoint and the monitor widget's paging read through it. The cost of a page depends on the page, not on
the size of the log:

- a page from the end (``start < 0``) walks backwards from the end of the file in blocks;
- a page from a line number (``start >= 0``) seeks through a sparse line index: the byte offset and line
  number of the first line after every ~64 KiB of the file. The index is built by one forward scan (about
  1.3 s per GB on a 2-core CI machine), kept per file in a small in-process LRU cache (32 files, keyed by
  path, device and inode; 256 KiB per GB of log) and extended incrementally as the log grows: a log is
  append-only. A file that shrank, changed inode, or no longer has a newline where the index ended
  (rewritten in place) is indexed again.

What counts as a line: bytes up to a ``\\n``. A last line without its ``\\n`` yet (still being written, or
the run ended mid-line) is never returned and not counted: pages only hold complete lines, so paging
forward while a rank writes sees every line exactly once, with no partial line that later changes. The
watcher's cursor (``events.FileTail``) counts lines the same way, so its line numbers and these agree.
Lines come without their ``\\n`` and without one trailing ``\\r``; invalid UTF-8 is replaced (U+FFFD),
never raised.

Memory: a read holds the requested lines (their bytes, then their text) plus one block buffer (64 KiB to
1 MiB). A single line is returned whole, however long it is.
"""

from __future__ import annotations

import bisect
import os
import threading
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field
from io import FileIO
from pathlib import Path

from nbtrain.model import LogPage

__all__ = ["LogPage", "clear_index_cache", "read_page"]

SCAN_BLOCK = 1 << 20  # the largest block read at once (index scans read only this size)
BACK_BLOCK = 64 << 10  # the first block of a page read or a backward walk (doubles up to SCAN_BLOCK)
INDEX_EVERY = 64 << 10  # bytes between entries of the sparse index (16 bytes per entry: 256 KiB per GB)
TAIL_INDEX_MAX = 16 << 20  # a read from the end indexes up to this many new bytes to report an absolute start
CACHED_FILES = 32
_NL = b"\n"


def read_page(path: Path, start: int, limit: int) -> LogPage:
    """Up to ``limit`` complete lines of the log at ``path``, from line ``start``.

    - ``start >= 0``: the 0-based line number of the first line. The page holds lines
      ``start .. min(start + limit, total) - 1``; ``page.start == start`` (also past the end, where the page
      is empty) and ``page.total`` is the number of complete lines.
    - ``start < 0``: counts from the end: the first line is ``total + start``, clamped to 0 (``-100, 100``:
      the last 100 lines; ``-1, 1``: the last line; ``-100, 10``: 10 lines from the 100th-last on).
      When the line count is cheap to know (the cached index covers all but the last 16 MiB of the file, or
      the backward walk reached the beginning of the file), ``page.start`` is absolute and ``page.total`` is
      set. Otherwise (a large log nobody has paged by line number yet: counting 1 GB of lines costs ~1.3 s)
      ``page.total`` is None and ``page.start`` stays negative: ``lines[i]`` is line ``total + page.start + i``
      (a from-the-end read that finds fewer than ``-start`` lines always knows the count).
    - A missing file is an empty log (``total == 0``); ``limit == 0`` gives no lines but the same
      ``start``/``total`` a non-empty page would.
    - Only complete lines exist (see the module docstring); the file is read as it was when the call began.

    Raises ValueError for a negative ``limit``; an OSError other than a missing file propagates.
    """
    if limit < 0:
        raise ValueError(f"read_page: limit must be >= 0, got {limit}.")
    try:
        handle = open(path, "rb", buffering=0)
    except FileNotFoundError:
        return LogPage((), max(start, 0), 0)
    with handle:
        info = os.fstat(handle.fileno())
        if start < 0:
            index = _index_for(path, handle, info, create=info.st_size <= TAIL_INDEX_MAX)
            if index is None or info.st_size - index.scanned > TAIL_INDEX_MAX:
                return _walk_back(handle, info.st_size, -start, limit)
        else:
            index = _index_for(path, handle, info, create=True)
        assert index is not None  # create=True always gives one
        with index.lock:
            index.extend(handle, info.st_size)
            total, stop = index.lines, index.scanned
            first = max(0, total + start) if start < 0 else start
            line, offset = index.locate(first)
        if first >= total or limit == 0:
            return LogPage((), first, total)
        return LogPage(_read_forward(handle, offset, first - line, min(limit, total - first), stop), first, total)


def clear_index_cache() -> None:
    """Forget every cached line index (tests; a server that wants the memory back)."""
    with _CACHE_LOCK:
        _CACHE.clear()


# -- reading ----------------------------------------------------------------------------------------
def _read_forward(handle: FileIO, offset: int, skip: int, count: int, stop: int) -> tuple[str, ...]:
    """``count`` lines after skipping ``skip`` lines from the line start at ``offset``, reading no further than
    ``stop`` (the offset just after a newline), in blocks that grow from 64 KiB to 1 MiB."""
    chunks: list[bytes] = []
    found = 0  # newlines in ``chunks``
    position, block = offset, BACK_BLOCK
    while position < stop and found < count:
        data = os.pread(handle.fileno(), min(block, stop - position), position)
        if not data:  # the file shrank under us: what was read is all there is
            break
        position += len(data)
        block = min(2 * block, SCAN_BLOCK)
        if skip:
            here = data.count(_NL)
            if here < skip:
                skip -= here
                continue
            data = data.split(_NL, skip)[skip]
            skip = 0
        chunks.append(data)
        found += data.count(_NL)
    # One decode for the whole page (a newline never belongs to a UTF-8 sequence, so decoding line by line
    # would replace the same bytes); the text after the count-th newline is dropped.
    text = b"".join(chunks).decode("utf-8", "replace")
    del chunks
    lines = text.split("\n", count)
    lines = lines[:count] if len(lines) > count else lines[:-1]
    if "\r" in text:
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    return tuple(lines)


def _newline_back(handle: FileIO, end: int, n: int) -> tuple[int | None, int]:
    """The offset of the ``n``-th newline (n >= 1) counting backwards from ``end`` (exclusive) and ``n``, or
    (None, how many newlines ``[0, end)`` holds) when there are fewer. Blocks grow from 64 KiB to 1 MiB."""
    found, position, block = 0, end, BACK_BLOCK
    while position > 0:
        size = min(block, position)
        position -= size
        data = os.pread(handle.fileno(), size, position)
        here = data.count(_NL)
        if found + here >= n:
            return position + len(data.rsplit(_NL, n - found)[0]), n
        found += here
        block = min(2 * block, SCAN_BLOCK)
    return None, found


def _walk_back(handle: FileIO, size: int, back: int, limit: int) -> LogPage:
    """A page from the end without an index: the first line is ``back`` lines before the end."""
    last, _ = _newline_back(handle, size, 1)
    if last is None:  # no complete line at all
        return LogPage((), 0, 0)
    end = last + 1
    before, found = _newline_back(handle, last, back)
    if before is None:  # fewer than ``back`` lines: the walk counted them all
        total = found + 1
        return LogPage(_read_forward(handle, 0, 0, min(limit, total), end), 0, total)
    return LogPage(_read_forward(handle, before + 1, 0, min(limit, back), end), -back, None)


# -- the sparse line index ------------------------------------------------------------------------
@dataclass
class _Index:
    """Line numbers and byte offsets of line starts, about one per INDEX_EVERY bytes, up to ``scanned``."""

    device: int
    inode: int
    lines: int = 0  # complete lines in bytes [0, scanned)
    scanned: int = 0  # the offset just after the last newline seen
    line_at: array[int] = field(default_factory=lambda: array("q", [0]))
    offset_at: array[int] = field(default_factory=lambda: array("q", [0]))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def extend(self, handle: FileIO, size: int) -> None:
        """Count the newlines of ``[scanned, size)`` (one pass through a reused 1 MiB buffer), adding an entry
        about every INDEX_EVERY bytes."""
        buffer = bytearray(SCAN_BLOCK)
        view = memoryview(buffer)
        position = self.scanned
        handle.seek(position)
        while position < size:
            count = handle.readinto(view[: min(SCAN_BLOCK, size - position)])
            if not count:
                break
            for low in range(0, count, INDEX_EVERY):
                high = min(low + INDEX_EVERY, count)
                found = buffer.count(_NL, low, high)
                if found:
                    self.lines += found
                    self.scanned = position + buffer.rfind(_NL, low, high) + 1
                    if self.scanned - self.offset_at[-1] >= INDEX_EVERY:
                        self.line_at.append(self.lines)
                        self.offset_at.append(self.scanned)
            position += count
        view.release()

    def locate(self, line: int) -> tuple[int, int]:
        """The indexed (line number, byte offset) at or before ``line``."""
        i = bisect.bisect_right(self.line_at, line) - 1
        return self.line_at[i], self.offset_at[i]


_CACHE: OrderedDict[str, _Index] = OrderedDict()
_CACHE_LOCK = threading.Lock()


def _index_for(path: Path, handle: FileIO, info: os.stat_result, *, create: bool) -> _Index | None:
    """The cached index of ``path`` while it still describes the file; else a new empty one (cached) when
    ``create``, or None."""
    key = os.fspath(path)
    with _CACHE_LOCK:
        index = _CACHE.get(key)
        if index is not None:
            _CACHE.move_to_end(key)
    if index is not None and (index.device, index.inode) == (info.st_dev, info.st_ino) and (
            info.st_size >= index.scanned
            and (index.scanned == 0 or os.pread(handle.fileno(), 1, index.scanned - 1) == _NL)):
        return index
    if not create:
        return None
    index = _Index(info.st_dev, info.st_ino)
    with _CACHE_LOCK:
        _CACHE[key] = index
        _CACHE.move_to_end(key)
        while len(_CACHE) > CACHED_FILES:
            _CACHE.popitem(last=False)
    return index
