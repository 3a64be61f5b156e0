"""The attempt directory a Kubernetes run is mirrored into (the same layout as a local run's).

::

    attempts/<n>/events/rank-<r>.jsonl    rank r's events, as the worker wrote them (original seq and time)
    attempts/<n>/events/kubernetes.jsonl  STATE/NOTICE/FAILURE events nbtrain derives from the API objects
    attempts/<n>/logs/rank-<r>.log        rank r's output lines;  logs/node-<i>.log  the launcher's own lines
    attempts/<n>/mirror.json              how far each pod's log is copied (uid -> last timestamp, lines at it)
    attempts/<n>/status.json              the latest state, and the verdict once the run ended
    attempts/<n>/mirror.lock              held by the one process that mirrors (flock)
    attempts/<n>/cancel.request           cancel was asked for (a verdict of CANCELLED follows)
    attempts/<n>/event.key                the attempt's event key (hex, mode 0600): what tells the pods' event
                                          lines from printed text; the store is trusted, the pod log is not

Like everything in the store, the directory is private to its user: directories 0700, files 0600.

Each append is one ``os.write`` on an ``O_APPEND`` descriptor, so readers (cursors, ``logs()``) see
whole lines. Positions are saved after the lines they count are written: a mirror that dies between
the two can at worst copy one batch twice; a broken stream never loses or repeats a line.
"""

from __future__ import annotations

import errno
import json
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from nbtrain.backends.kubernetes.lines import Record
from nbtrain.backends.storecursor import tail_lines
from nbtrain.events import Event, decode_event_key, encode_event_key, read_events
from nbtrain.filelock import FileLock
from nbtrain.store import PRIVATE_FILE, private_dir, read_json

__all__ = ["KEY_FILE", "AttemptFiles", "tail_lines", "write_private_text"]

KEY_FILE = "event.key"
RESERVE = ".verdict-reserve"  # freed when the disk is full, so the verdict can be written
RESERVE_BYTES = 256 * 1024


def _write_json(path: Path, data: Any) -> None:
    write_private_text(path, json.dumps(data, sort_keys=True, default=str))


def write_private_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8): a 0600 file in 0700 directories, whatever the umask.

    Atomic replace without fsync (protects against a dying process, which is what matters here)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    private_dir(path.parent)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


class AttemptFiles:
    """Writer (and small reader) of one attempt directory. Thread-safe."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.events_dir = root / "events"
        self.logs_dir = root / "logs"
        self._lock = threading.Lock()
        self._fds: dict[Path, int] = {}
        self._mirror_lock = FileLock(root / "mirror.lock")  # held by the one mirroring process
        self.positions: dict[str, dict[str, Any]] = {}
        self.seen: set[tuple[str, int, int]] = set()
        self.disk_full: str | None = None  # the first path a write failed on for lack of space

    # -- ownership ------------------------------------------------------------------------------
    def try_lock(self) -> bool:
        """Become the one mirroring process of this attempt (False: another process is)."""
        private_dir(self.root)
        return self._mirror_lock.acquire(blocking=False)

    def release(self) -> None:
        """Close every file and give up the lock."""
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
            self._mirror_lock.release()

    # -- the event key --------------------------------------------------------------------------
    def write_key(self, key: bytes) -> None:
        """Keep the attempt's event key in ``event.key``, readable by this user only (0600, replaced atomically)."""
        private_dir(self.root)
        tmp = self.root / f".{KEY_FILE}.{os.getpid()}.{threading.get_ident()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.fchmod(fd, 0o600)  # whatever the umask
            os.write(fd, (encode_event_key(key) + "\n").encode("ascii"))
        finally:
            os.close(fd)
        os.replace(tmp, self.root / KEY_FILE)

    def read_key(self) -> bytes | None:
        """The key :meth:`write_key` kept, or None (no file, or not a key)."""
        try:
            fd = os.open(self.root / KEY_FILE, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            return decode_event_key(os.read(fd, 4096))
        finally:
            os.close(fd)

    # -- state ----------------------------------------------------------------------------------
    def load(self) -> list[Event]:
        """Read positions and every rank event already mirrored (returned, for the caller's bookkeeping)."""
        try:
            self.positions = dict(read_json(self.root / "mirror.json").get("pods") or {})
        except (OSError, ValueError):
            self.positions = {}
        events: list[Event] = []
        for path in sorted(self.events_dir.glob("rank-*.jsonl")):
            for event in read_events(path):
                if event.key not in self.seen:
                    self.seen.add(event.key)
                    events.append(event)
        return events

    def own_events(self) -> list[Event]:
        """The events nbtrain derived so far (events/kubernetes.jsonl)."""
        return list(read_events(self.events_dir / "kubernetes.jsonl"))

    def position(self, uid: str, name: str, node: int) -> dict[str, Any]:
        """The copy position of pod ``uid`` (created at 0 lines)."""
        with self._lock:
            return self.positions.setdefault(uid, {"name": name, "node": node, "lines": 0, "complete": False})

    def is_complete(self, uid: str) -> bool:
        """Every line of pod ``uid``'s log that will ever be read is copied."""
        with self._lock:
            return bool(self.positions.get(uid, {}).get("complete"))

    def save_positions(self) -> None:
        """Persist how many lines of each pod's log are copied."""
        with self._lock:
            _write_json(self.root / "mirror.json", {"pods": self.positions})

    def read_status(self) -> dict[str, Any] | None:
        """status.json, or None."""
        try:
            data = read_json(self.root / "status.json")
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def write_status(self, data: dict[str, Any]) -> None:
        """Replace status.json."""
        with self._lock:
            try:
                _write_json(self.root / "status.json", data)
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
                self.disk_full = self.disk_full or str(self.root / "status.json")

    @property
    def cancel_requested(self) -> bool:
        """Someone (this process or another) asked to cancel."""
        return (self.root / "cancel.request").exists()

    def request_cancel(self) -> None:
        """Record a cancel request."""
        private_dir(self.root)
        os.close(os.open(self.root / "cancel.request", os.O_WRONLY | os.O_CREAT, PRIVATE_FILE))

    # -- appends --------------------------------------------------------------------------------
    def _append(self, path: Path, data: bytes) -> None:
        try:
            fd = self._fds.get(path)
            if fd is None:
                private_dir(path.parent)
                fd = self._fds[path] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE)
            os.write(fd, data)
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
            self.disk_full = self.disk_full or str(path)  # the verdict names it; the data is lost either way

    # -- a full disk ----------------------------------------------------------------------------
    def reserve(self) -> None:
        """Set aside a little space so the verdict can still be written if the store's disk fills up."""
        private_dir(self.root)
        try:
            with open(os.open(self.root / RESERVE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE), "wb") as handle:
                handle.write(b"\0" * RESERVE_BYTES)
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
            self.disk_full = self.disk_full or str(self.root)

    def release_reserve(self) -> None:
        """Free the reserve (when the disk is full, right before the verdict is written; at the end otherwise)."""
        (self.root / RESERVE).unlink(missing_ok=True)

    def append_lines(self, name: str, lines: Iterable[str]) -> None:
        """Append lines to ``logs/<name>.log``."""
        data = "".join(line + "\n" for line in lines).encode("utf-8", "replace")
        if data:
            with self._lock:
                self._append(self.logs_dir / f"{name}.log", data)

    def write_records(self, records: Iterable[Record], *, node: int, sole_rank: int | None = None) -> list[Event]:
        """Append a pod's records: text to ``logs/rank-<r>.log`` (``node-<node>.log`` without a rank, or
        ``rank-<sole_rank>.log`` when the pod runs one process without torchelastic's prefixes), events
        to their source's file. Returns the events not seen before."""
        texts: dict[str, list[str]] = {}
        events: list[Event] = []
        for record in records:
            if record.event is not None:
                events.append(record.event)
            elif record.text is not None:
                rank = record.rank if record.rank is not None else sole_rank
                name = f"rank-{rank}" if rank is not None else f"node-{node}"
                texts.setdefault(name, []).append(record.text)
        for name, chunk in texts.items():
            self.append_lines(name, chunk)
        return self.append_events(events)

    def append_events(self, events: Iterable[Event]) -> list[Event]:
        """Append events not seen before to ``events/<source>.jsonl``; returns the new ones."""
        fresh: list[Event] = []
        with self._lock:
            by_source: dict[str, list[str]] = {}
            for event in events:
                if event.key in self.seen:
                    continue
                self.seen.add(event.key)
                fresh.append(event)
                source = event.source if event.source.startswith("rank-") else f"rank-{event.rank}"
                by_source.setdefault(source, []).append(event.to_json() + "\n")
            for source, lines in by_source.items():
                self._append(self.events_dir / f"{_safe(source)}.jsonl", "".join(lines).encode("utf-8"))
        return fresh


def _safe(source: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in source)[:64] or "unknown"
