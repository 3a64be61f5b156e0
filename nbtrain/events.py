"""The one event schema shared by workers, the supervisor and the notebook (pure, stdlib only).

Events are JSON lines, one file per source (``rank-3.jsonl``, ``supervisor.jsonl``), appended and
never rewritten. Each carries a per-source sequence number so a reader that re-reads a file (attach
after a kernel restart) can deliver every event exactly once. Readers only consume complete lines:
a line still being written is picked up on the next read.

This module travels with the worker runtime: it must import nothing from nbtrain but itself.
"""

from __future__ import annotations

import enum
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "SCHEMA_VERSION",
    "STREAM_MARKER",
    "Event",
    "EventKind",
    "EventWriter",
    "FileTail",
    "StreamEventWriter",
    "parse_line",
    "parse_stream_line",
    "read_events",
]

STREAM_MARKER = "@@nbtrain-event@@ "
_RANK_PREFIX = re.compile(r"^\[(?:default)?(\d+)\]:|^\[rank(\d+)\]:")

SCHEMA_VERSION = 1


class EventKind(str, enum.Enum):
    """What an event reports. Payload keys per kind are listed on each member."""

    STATE = "state"  # state, reason                     (supervisor: the run's lifecycle)
    RANK_START = "rank_start"  # node, local_rank, pid, host (a worker began; before user code)
    ENV = "env"  # host, python, torch, accelerate, device, gpu_name (a worker's environment)
    METRIC = "metric"  # step, values{name: float}, total   (Accelerator.log / nbtrain.log)
    HEARTBEAT = "heartbeat"  # step                        (a worker is alive)
    CHECKPOINT = "checkpoint"  # step, path                  (a complete checkpoint exists)
    RANK_ERROR = "rank_error"  # exc_type, message, traceback (user code raised on this rank)
    RANK_DONE = "rank_done"  # ok, has_result               (a worker finished its code cleanly)
    FAILURE = "failure"  # node, exit_code, signal, reason, traceback, last_lines (supervisor verdict)
    NOTICE = "notice"  # message                           (one-time information for the user)
    RESULT = "result"  # pickle_b64                        (rank 0's result when no shared disk exists)


@dataclass(frozen=True)
class Event:
    """One record. ``rank`` is the global rank, or None for the supervisor."""

    kind: EventKind
    source: str
    seq: int
    time: float
    attempt: int = 0
    rank: int | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """One line of JSON (no newline)."""
        record = {
            "v": SCHEMA_VERSION,
            "kind": self.kind.value,
            "src": self.source,
            "seq": self.seq,
            "t": self.time,
            "attempt": self.attempt,
            "rank": self.rank,
            "data": self.data,
        }
        return json.dumps(record, separators=(",", ":"), default=_json_default, allow_nan=True)

    @classmethod
    def from_json(cls, line: str) -> Event | None:
        """Parse one line; None for a line of an unknown kind or a newer major schema."""
        record = json.loads(line)
        if not isinstance(record, dict) or int(record.get("v", 0)) > SCHEMA_VERSION:
            return None
        try:
            kind = EventKind(record["kind"])
        except ValueError:
            return None
        return cls(
            kind=kind,
            source=str(record["src"]),
            seq=int(record["seq"]),
            time=float(record["t"]),
            attempt=int(record.get("attempt", 0)),
            rank=record.get("rank"),
            data=dict(record.get("data") or {}),
        )

    @property
    def key(self) -> tuple[str, int, int]:
        """Identity for de-duplication: (source, attempt, seq)."""
        return (self.source, self.attempt, self.seq)


def _json_default(value: Any) -> Any:
    """Make numpy/torch scalars and other number-likes serialisable."""
    item = getattr(value, "item", None)
    if callable(item):
        return item()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    return repr(value)


class EventWriter:
    """Appends events of one source to one JSONL file. Thread-safe; each line is flushed at once.

    Each line goes out in a single ``os.write`` on an ``O_APPEND`` descriptor, so a crash leaves at
    worst one incomplete last line, which readers skip.
    """

    def __init__(self, path: Path, source: str, *, attempt: int = 0, rank: int | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.source = source
        self.attempt = attempt
        self.rank = rank
        self._lock = threading.Lock()
        self._seq = _last_seq(path)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if _ends_mid_line(path):
            os.write(self._fd, b"\n")  # a crash mid-line: close that fragment so the next event stays whole

    def emit(self, kind: EventKind, **data: Any) -> Event:
        """Write one event now and return it."""
        with self._lock:
            self._seq += 1
            event = Event(kind, self.source, self._seq, time.time(), self.attempt, self.rank, data)
            os.write(self._fd, (event.to_json() + "\n").encode("utf-8"))
            return event

    def close(self) -> None:
        """Close the file; later emits raise OSError."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


class StreamEventWriter:
    """Writes events of one source as marked lines on a file descriptor (default: stdout).

    Used where no shared disk exists (Kubernetes pods): the events travel inside the pod log, each as
    ``@@nbtrain-event@@ {json}`` on its own line, in one ``os.write``. Same ``emit`` contract as
    :class:`EventWriter`.
    """

    def __init__(self, source: str, *, attempt: int = 0, rank: int | None = None, fd: int = 1) -> None:
        self.source = source
        self.attempt = attempt
        self.rank = rank
        self.fd = fd
        self._lock = threading.Lock()
        self._seq = 0

    def emit(self, kind: EventKind, **data: Any) -> Event:
        """Write one event line now and return the event."""
        with self._lock:
            self._seq += 1
            event = Event(kind, self.source, self._seq, time.time(), self.attempt, self.rank, data)
            os.write(self.fd, (STREAM_MARKER + event.to_json() + "\n").encode("utf-8"))
            return event

    def close(self) -> None:
        """Nothing to release (the descriptor belongs to the process)."""


def parse_stream_line(line: str) -> tuple[int | None, Event | None, str]:
    """Split one launcher/pod log line into (rank, event, text).

    ``rank`` comes from torchelastic's line prefix (``[rank3]:`` or ``[default3]:``) when present;
    ``event`` is set when the line carries a :class:`StreamEventWriter` record; ``text`` is the plain
    log text without the prefix (what precedes the marker, if any: usually "").
    """
    rank: int | None = None
    match = _RANK_PREFIX.match(line)
    if match:
        rank = int(match.group(1) or match.group(2))
        line = line[match.end():]
    at = line.find(STREAM_MARKER)
    if at >= 0:  # text before the marker is output the user printed without a newline
        return rank, _parse(line[at + len(STREAM_MARKER):]), line[:at]
    return rank, None, line


def _ends_mid_line(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            if handle.tell() == 0:
                return False
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) != b"\n"
    except OSError:
        return False


def _last_seq(path: Path) -> int:
    """The highest sequence number already in ``path`` (0 when new), so a reopened writer continues."""
    last = 0
    for event in read_events(path):
        last = max(last, event.seq)
    return last


class FileTail:
    """Incremental reader of an append-only file: yields only complete lines, remembers its offset."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset

    def read_lines(self, max_bytes: int = 4 * 1024 * 1024) -> list[str]:
        """New complete lines since the last call (without newlines); [] when none or no file yet."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read(max_bytes)
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n")
        if end < 0:
            if len(chunk) >= max_bytes:  # one enormous line: deliver it cut rather than stall forever
                self.offset += len(chunk)
                return [chunk.decode("utf-8", "replace")]
            return []
        self.offset += end + 1
        return chunk[:end].decode("utf-8", "replace").split("\n")


def read_events(path: Path) -> Iterator[Event]:
    """Every complete, parseable event in ``path`` in file order (missing file: nothing)."""
    tail = FileTail(path)
    while True:
        lines = tail.read_lines()
        if not lines:
            return
        for line in lines:
            event = _parse(line)
            if event is not None:
                yield event


def _parse(line: str) -> Event | None:
    if not line.strip():
        return None
    try:
        return Event.from_json(line)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def parse_line(line: str) -> Event | None:
    """Parse one JSONL line; None for blank, corrupt or unknown-kind lines."""
    return _parse(line)
