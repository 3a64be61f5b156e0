"""A cursor over the event and log files a run keeps in the store (pure file reading, shared by backends).

The local backend's ranks write these files directly; the Kubernetes backend mirrors pod logs into
the same layout. Either way, reading them with one :class:`StoreCursor` gives every event and every
line exactly once, attempt by attempt.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from nbtrain.backends.base import RunCursor
from nbtrain.events import Event, FileTail, parse_line
from nbtrain.model import Batch, LogLine
from nbtrain.store import Store

__all__ = ["StoreCursor", "attempt_numbers", "follow_events", "tail_lines"]


def attempt_numbers(store: Store, run_id: str) -> list[int]:
    """The attempts of ``run_id`` that have a directory in ``store``, in order."""
    root = store.run_dir(run_id) / "attempts"
    if not root.is_dir():
        return []
    return sorted(int(p.name) for p in root.iterdir() if p.name.isdigit())


class StoreCursor:
    """Tails every ``events/*.jsonl`` and ``logs/rank-*.log`` of every attempt of one run, in attempt order."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self.event_tails: dict[Path, FileTail] = {}
        self.log_tails: dict[Path, tuple[FileTail, int, int]] = {}

    def poll(self, *, max_lines: int = 50_000) -> Batch:
        """See :class:`nbtrain.backends.base.RunCursor`. ``max_lines=0`` skips logs."""
        events: list[Event] = []
        lines: list[LogLine] = []
        for attempt in attempt_numbers(self.store, self.run_id):
            root = self.store.attempt_dir(self.run_id, attempt)
            for path in sorted((root / "events").glob("*.jsonl")):
                tail = self.event_tails.setdefault(path, FileTail(path))
                for text in tail.read_lines():
                    event = parse_line(text)
                    if event is not None:
                        events.append(event)
            if max_lines <= 0:
                continue
            for path in sorted((root / "logs").glob("rank-*.log")):
                if path not in self.log_tails:
                    self.log_tails[path] = (FileTail(path), int(path.stem.split("-")[1]), attempt)
                tail, rank, att = self.log_tails[path]
                budget = max_lines - len(lines)
                if budget <= 0:
                    break
                for text in tail.read_lines(max_bytes=min(4 * 1024 * 1024, budget * 200)):
                    lines.append(LogLine(rank, text, att))
        return Batch(tuple(events), tuple(lines))


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
