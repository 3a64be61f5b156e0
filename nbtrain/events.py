"""The one event schema shared by workers, the supervisor and the notebook (pure, stdlib only).

Events are JSON lines, one file per source (``rank-3.jsonl``, ``supervisor.jsonl``), appended and
never rewritten. Each carries a per-source sequence number so a reader that re-reads a file (attach
after a kernel restart) can deliver every event exactly once. Readers only consume complete lines:
a line still being written is picked up on the next read.

Where no shared disk exists (Kubernetes pods), events travel inside the rank's stdout instead, next to
whatever the training code prints. That channel is untrusted (a printed dataset row can contain
anything), so each event line carries an HMAC-SHA256 tag over its exact JSON text, keyed by a random
per-attempt key that only the notebook side and the attempt's processes know::

    [rank3]:@@nbtrain-event@@ <64 hex digits: HMAC-SHA256(key, json)> {json}

The marker counts only at the very start of a line (after torchelastic's ``[rankN]:`` prefix); a line
whose tag does not verify is plain log text, never an event (:func:`parse_stream_line`).

This module travels with the worker runtime: it imports nothing from nbtrain but :mod:`nbtrain.private` (stdlib
only, shipped with it).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import os
import re
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbtrain.private import PRIVATE_FILE, private_dir

__all__ = [
    "EVENT_KEY_BYTES",
    "NOT_FROM_RANKS",
    "SCHEMA_VERSION",
    "STEP_RANGE",
    "STREAM_MARKER",
    "Event",
    "EventKind",
    "EventWriter",
    "FileTail",
    "LineBlock",
    "StreamEventWriter",
    "decode_event_key",
    "encode_event_key",
    "event_tag",
    "new_event_key",
    "parse_line",
    "parse_stream_line",
    "read_events",
    "stream_event_line",
]

STREAM_MARKER = "@@nbtrain-event@@ "
EVENT_KEY_BYTES = 32  # HMAC-SHA256 keys: 256 random bits per attempt
_TAG_HEX = 64  # hex digits of an HMAC-SHA256 tag
_HEX_TAG = re.compile(r"[0-9a-f]{64}")
# torchelastic's per-line prefix; a bounded ASCII number (int() refuses numbers of thousands of digits)
_RANK_PREFIX = re.compile(r"^\[(?:default)?([0-9]{1,9})\]:|^\[rank([0-9]{1,9})\]:")

SCHEMA_VERSION = 1
# The steps a metric point may have: MLflow stores them as int64, and so do the charts' series (array "q").
STEP_RANGE = (-(2**63), 2**63 - 1)


class EventKind(str, enum.Enum):
    """What an event reports. Payload keys per kind are listed on each member."""

    STATE = "state"  # state, reason                     (supervisor: the run's lifecycle)
    RANK_START = "rank_start"  # node, local_rank, pid, host (a worker began; before user code)
    ENV = "env"  # host, python, torch, accelerate, device, gpu_name, cuda, nccl, driver; packages on local rank 0
    METRIC = "metric"  # step, values{name: float}, total   (Accelerator.log / nbtrain.log)
    HEARTBEAT = "heartbeat"  # step                        (a worker is alive)
    CHECKPOINT = "checkpoint"  # step, path                  (a complete checkpoint exists)
    RANK_ERROR = "rank_error"  # exc_type, message, traceback (user code raised on this rank)
    RANK_DONE = "rank_done"  # ok, has_result               (a worker finished its code cleanly)
    FAILURE = "failure"  # node, exit_code, signal, reason, traceback, last_lines (supervisor verdict)
    NOTICE = "notice"  # message                           (one-time information for the user)
    #                    supervisor only: stalled[rank] (a stall's ranks), warm{gang, generation, recycled, collateral}
    RESULT = "result"  # pickle_b64                        (rank 0's result when no shared disk exists)
    PARAMS = "params"  # values{name: str}, project         (Accelerator.init_trackers' config, from rank 0)
    DATASET = "dataset"  # name, version, url, datasets[str]  (nbtrain.dataset_path resolved a dataset)
    ARTIFACT = "artifact"  # artifact_path, name, path | data_b64, bytes (a file logged through the run's trackers)


#: Kinds only nbtrain itself reports (the supervisor, the Kubernetes mirror), never a rank: a pod's output
#: is never taken to carry one. Add here any new kind that is not a worker's to send.
NOT_FROM_RANKS = frozenset({EventKind.STATE, EventKind.FAILURE})


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
        rank = record.get("rank")
        if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool)):
            return None  # a global rank is an integer (or absent, for the supervisor)
        return cls(
            kind=kind,
            source=str(record["src"]),
            seq=int(record["seq"]),
            time=float(record["t"]),
            attempt=int(record.get("attempt", 0)),
            rank=rank,
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
        private_dir(path.parent)
        self.path = path
        self.source = source
        self.attempt = attempt
        self.rank = rank
        self._lock = threading.Lock()
        self._seq = _last_seq(path)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE)
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


def new_event_key() -> bytes:
    """A fresh random per-attempt key for :func:`event_tag` (the notebook side makes one per submit)."""
    return secrets.token_bytes(EVENT_KEY_BYTES)


def encode_event_key(key: bytes) -> str:
    """The key as text (hex), for an environment variable, a Kubernetes Secret or a file."""
    return key.hex()


def decode_event_key(text: str | bytes | None) -> bytes | None:
    """The key from :func:`encode_event_key`'s text; None when absent, malformed or too short to be one."""
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        return None
    return key if len(key) >= EVENT_KEY_BYTES else None


def event_tag(key: bytes, text: str) -> str:
    """HMAC-SHA256 of ``text`` (an event's exact JSON, UTF-8) under ``key``, as 64 lowercase hex digits."""
    return hmac.new(key, text.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def stream_event_line(key: bytes, event: Event) -> str:
    """``event`` as one authenticated stdout line (no newline): marker, tag, space, JSON."""
    text = event.to_json()
    return f"{STREAM_MARKER}{event_tag(key, text)} {text}"


class StreamEventWriter:
    """Writes events of one source as authenticated lines on a file descriptor (default: stdout).

    Used where no shared disk exists (Kubernetes pods): the events travel inside the pod log, each as
    ``@@nbtrain-event@@ <tag> {json}`` (:func:`stream_event_line`) in one ``os.write``. The write starts
    with a newline, so the marker begins a line even when the code printed something without one;
    readers drop the one blank line this leaves before an event (``nbtrain.backends.kubernetes.lines``).
    Same ``emit`` contract as :class:`EventWriter`. With ``key=None`` (no key was given to the process)
    nothing is written: an event nobody can authenticate would only be noise in the log.
    """

    def __init__(self, source: str, *, key: bytes | None, attempt: int = 0, rank: int | None = None,
                 fd: int = 1) -> None:
        self.source = source
        self.attempt = attempt
        self.rank = rank
        self.fd = fd
        self._key = key
        self._lock = threading.Lock()
        self._seq = 0

    def emit(self, kind: EventKind, **data: Any) -> Event:
        """Write one event line now and return the event."""
        with self._lock:
            self._seq += 1
            event = Event(kind, self.source, self._seq, time.time(), self.attempt, self.rank, data)
            if self._key is not None:
                os.write(self.fd, ("\n" + stream_event_line(self._key, event) + "\n").encode("utf-8", "surrogatepass"))
            return event

    def close(self) -> None:
        """Nothing to release (the descriptor belongs to the process)."""


def parse_stream_line(line: str, *, key: bytes | None) -> tuple[int | None, Event | None, str]:
    """Split one launcher/pod log line into (rank, event, text).

    ``rank`` comes from torchelastic's line prefix (``[rank3]:``, ``[default3]:`` or ``[3]:``) when
    present; ``text`` is the line without that prefix. ``event`` is set only when the rest of the line
    *starts* with :data:`STREAM_MARKER`, followed by a tag that verifies (constant-time) under ``key``
    over the exact JSON text after it, and that JSON is a known event; ``text`` is then "". Anything
    else — a marker mid-line, a missing, malformed or wrong tag, tampered JSON, no ``key`` — is text.
    """
    rank: int | None = None
    match = _RANK_PREFIX.match(line)
    if match:
        rank = int(match.group(1) or match.group(2))
        line = line[match.end():]
    if key is None or not line.startswith(STREAM_MARKER):
        return rank, None, line
    body = line[len(STREAM_MARKER):]
    tag, gap, text = body[:_TAG_HEX], body[_TAG_HEX:_TAG_HEX + 1], body[_TAG_HEX + 1:]
    if gap != " " or not _HEX_TAG.fullmatch(tag):
        return rank, None, line
    if not hmac.compare_digest(event_tag(key, text).encode("ascii"), tag.encode("ascii")):
        return rank, None, line
    event = _parse(text)
    if event is None:
        return rank, None, line
    return rank, event, ""


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
    """Incremental reader of an append-only file: yields only complete lines, remembers its offset.

    Two ways to read, sharing one position: :meth:`read_lines` gives ``str`` lines; :meth:`read_block` gives
    the same lines as one ``bytes`` block and their count (no object per line: what bulk readers want).
    ``lines`` counts the lines delivered so far (from ``offset`` 0 it is the number of the next line).

    ``keep_open``: hold the file descriptor between reads (one ``pread`` per read instead of open, read and
    close: what matters to a reader polling hundreds of files ten times a second); :meth:`close` releases it.
    The file must then stay the same file (append-only, never replaced), which the store's files are.
    """

    def __init__(self, path: Path, offset: int = 0, *, keep_open: bool = False) -> None:
        self.path = path
        self.offset = offset
        self.lines = 0
        self.keep_open = keep_open
        self._fd = -1

    def read_lines(self, max_bytes: int = 4 * 1024 * 1024) -> list[str]:
        """New complete lines since the last call (without newlines); [] when none or no file yet."""
        data, count = self.read_block(max_bytes)
        return self.texts(data) if count else []

    def read_block(self, max_bytes: int = 4 * 1024 * 1024) -> tuple[bytes, int]:
        """New complete lines since the last read as ``(bytes, count)``: each line with its ``\\n``; (b"", 0) when none.

        A line longer than ``max_bytes`` is delivered cut (its first ``max_bytes`` bytes, without ``\\n``, count 1)
        rather than stalling the reader forever. :meth:`texts` turns the bytes into the ``str`` lines.
        """
        fd = self._fd
        # the common case (kept open) without a call more: pollers come here ~10,000 times a second
        chunk = self._new_bytes(fd, max_bytes) if fd >= 0 else self._read(max_bytes)
        if not chunk:
            return b"", 0
        end = chunk.rfind(b"\n")
        if end < 0:
            if len(chunk) >= max_bytes:  # one enormous line: deliver it cut rather than stall forever
                self.offset += len(chunk)
                self.lines += 1
                return chunk, 1
            return b"", 0
        if end + 1 < len(chunk):
            chunk = chunk[: end + 1]
        self.offset += end + 1
        count = chunk.count(b"\n")
        self.lines += count
        return chunk, count

    @staticmethod
    def texts(data: bytes) -> list[str]:
        """The ``str`` lines of a :meth:`read_block` block, without newlines (invalid UTF-8 replaced, never raised)."""
        text = data.decode("utf-8", "replace")
        if text.endswith("\n"):
            text = text[:-1]
        return text.split("\n")

    def close(self) -> None:
        """Release the descriptor ``keep_open`` holds (a later read opens the file again)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        if self._fd >= 0:  # a dropped reader must not leak its descriptor
            try:
                self.close()
            except Exception:  # noqa: BLE001 - nothing to do about it in a finaliser (or at interpreter exit)
                pass

    def _new_bytes(self, fd: int, max_bytes: int) -> bytes:
        """What the file holds past :attr:`offset` (at most ``max_bytes``), in one read of exactly that size.

        The size comes first (``fstat``): an idle file costs no read, and no buffer larger than the new bytes is
        allocated (``os.pread`` allocates what it is asked for, then shrinks it; a poller of 512 files doing that
        every round left tens of MB of heap in fragments, pinned by the few blocks a monitor keeps).
        """
        want = min(max_bytes, os.fstat(fd).st_size - self.offset)
        return os.pread(fd, want, self.offset) if want > 0 else b""

    def _read(self, max_bytes: int) -> bytes:
        fd = self._fd
        if fd < 0:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return b""
            if self.keep_open:
                self._fd = fd
        try:
            return self._new_bytes(fd, max_bytes)
        finally:
            if not self.keep_open:
                os.close(fd)


@dataclass(frozen=True, slots=True)
class LineBlock:
    """Complete lines of one rank's log read in one go (:meth:`FileTail.read_block`): ``count`` lines numbered
    from ``first`` (0-based, in that attempt's log), as the file's bytes (each line with its ``\\n``)."""

    rank: int
    attempt: int
    first: int
    count: int
    data: bytes

    def texts(self) -> list[str]:
        """Every line as text (decoded now)."""
        return FileTail.texts(self.data)

    def tail(self, count: int) -> list[str]:
        """The last ``count`` lines as text, decoding only their bytes."""
        if count <= 0:
            return []
        if count >= self.count:
            return self.texts()
        return FileTail.texts(self.data[self.tail_offset(count):])

    def tail_offset(self, count: int) -> int:
        """Where the last ``count`` lines start in ``data`` (0 when the block has no more than that).

        Counts newlines in a window sized from the average line length (C speed), widening it when lines
        are longer there, then steps to the exact newline: a few steps, not one per line.
        """
        data = self.data
        if count >= self.count:
            return 0
        if count <= 0:
            return len(data)
        end = len(data) - 1 if data.endswith(b"\n") else len(data)  # the last line's own newline is not a start
        if count <= 8:  # a few lines: step back newline by newline
            for _ in range(count):
                end = data.rfind(b"\n", 0, end)
            return end + 1
        window = len(data) * count // self.count + 64
        while True:
            start = max(0, end - window)
            found = data.count(b"\n", start, end)
            if found >= count or start == 0:
                break
            window *= 2
        if found < count:
            return 0
        position = start
        for _ in range(found - count + 1):  # the count-th newline from the end is this one from the start
            position = data.find(b"\n", position, end) + 1
        return position


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
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError):
        return None


def parse_line(line: str) -> Event | None:
    """Parse one JSONL line; None for blank, corrupt or unknown-kind lines."""
    return _parse(line)
