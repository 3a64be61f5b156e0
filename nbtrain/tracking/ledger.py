"""What has reached MLflow, kept on disk so forwarding is exactly once across kernels (pure + one file).

``runs/<id>/tracking.json`` (written atomically, only by the process holding ``tracking.lock``)::

    {"tracking_uri": ..., "experiment_id": ..., "mlflow_run_id": ...,
     "hwm": {"rank-0|0": 812, "supervisor|0": 5},   # per (source, attempt): highest seq handled
     "marked": [0, 1],                               # attempts whose nbtrain.attempt point is logged
     "finalized": {"attempt": 1, "state": "succeeded"} | null,
     "uploaded": {"bundles": [...], "logs": [0, 1], "failures": [0]}}

Events of one (source, attempt) stream arrive in sequence order, so one high-water mark per stream
says exactly what was handled. The mark moves only after the points of those events were accepted
by MLflow (``log_batch`` returned), and an event at or below it is skipped.

:class:`Pending` holds what is waiting for the next ``log_batch``, in event order, and cuts it into
MLflow-sized chunks whose marks can be committed one chunk at a time.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from nbtrain.events import Event
from nbtrain.store import write_json_atomic

__all__ = ["Entry", "Ledger", "Pending", "Point", "stream_key"]

MAX_POINTS_PER_BATCH = 1000  # MLflow's limit on metrics per log_batch
MAX_TAGS_PER_BATCH = 100


def stream_key(event: Event) -> str:
    """``"<source>|<attempt>"``: the JSON key of one event stream."""
    return f"{event.source}|{event.attempt}"


class Point(NamedTuple):
    """One metric point as MLflow stores it (timestamp in ms: the event's own time)."""

    key: str
    value: float
    timestamp: int
    step: int


@dataclass
class Entry:
    """One handled event: its stream mark and what it adds to MLflow (maybe nothing)."""

    stream: str
    seq: int
    points: list[Point] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    marks: int | None = None  # the attempt whose nbtrain.attempt point is among ``points``
    files: list[Any] = field(default_factory=list)  # uploaded before the mark moves (tracking.userfiles.UserFile)


@dataclass
class Ledger:
    """The persisted forwarding state of one run (see the module docstring)."""

    tracking_uri: str | None = None
    experiment_id: str | None = None
    mlflow_run_id: str | None = None
    hwm: dict[str, int] = field(default_factory=dict)
    marked: set[int] = field(default_factory=set)
    finalized: dict[str, Any] | None = None
    uploaded: dict[str, list[Any]] = field(default_factory=lambda: {"bundles": [], "logs": [], "failures": []})

    @classmethod
    def load(cls, path: Path) -> Ledger:
        """The ledger in ``path``; an empty one when missing or unreadable."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return cls()
        if not isinstance(data, dict):
            return cls()
        uploaded: dict[str, list[Any]] = {"bundles": [], "logs": [], "failures": []}
        uploaded.update({k: list(v) for k, v in (data.get("uploaded") or {}).items() if isinstance(v, list)})
        return cls(
            tracking_uri=data.get("tracking_uri"),
            experiment_id=data.get("experiment_id"),
            mlflow_run_id=data.get("mlflow_run_id"),
            hwm={str(k): int(v) for k, v in (data.get("hwm") or {}).items()},
            marked={int(a) for a in data.get("marked") or ()},
            finalized=data.get("finalized"),
            uploaded=uploaded,
        )

    def save(self, path: Path) -> None:
        """Replace ``path`` atomically."""
        write_json_atomic(path, {
            "tracking_uri": self.tracking_uri,
            "experiment_id": self.experiment_id,
            "mlflow_run_id": self.mlflow_run_id,
            "hwm": dict(sorted(self.hwm.items())),
            "marked": sorted(self.marked),
            "finalized": self.finalized,
            "uploaded": self.uploaded,
        })

    def seen(self, event: Event) -> bool:
        """True when ``event`` was already handled (at or below its stream's mark)."""
        return event.seq <= self.hwm.get(stream_key(event), 0)

    def commit(self, entries: list[Entry]) -> None:
        """Move the marks past ``entries`` (their points were accepted by MLflow)."""
        for entry in entries:
            if entry.seq > self.hwm.get(entry.stream, 0):
                self.hwm[entry.stream] = entry.seq
            if entry.marks is not None:
                self.marked.add(entry.marks)


class Pending:
    """Entries waiting for MLflow, oldest first; ``chunks()`` cuts them to fit one ``log_batch`` each."""

    def __init__(self) -> None:
        self.entries: deque[Entry] = deque()
        self.points = 0
        self.since: float | None = None  # monotonic time of the oldest entry with points

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, entry: Entry) -> None:
        """Append one handled event."""
        self.entries.append(entry)
        if entry.points or entry.tags or entry.files:
            self.points += len(entry.points)
            if self.since is None:
                self.since = time.monotonic()

    def clear(self) -> None:
        """Forget everything (after an error: a catch-up read will bring it back)."""
        self.entries.clear()
        self.points = 0
        self.since = None

    def due(self, *, max_points: int, max_age_s: float) -> bool:
        """True when enough points or old enough points wait."""
        if self.since is None:
            return False
        return self.points >= max_points or time.monotonic() - self.since >= max_age_s

    def chunks(self) -> Iterator[tuple[list[Point], dict[str, str], list[Entry]]]:
        """(points, tags, entries) per ``log_batch``: at most 1,000 points and 100 tags each.

        An event with more than 1,000 values spans several chunks; its entry (and so its mark) goes
        with the last of them. Chunks leave the queue as they are yielded: after a failed
        ``log_batch``, :meth:`clear` and read the events again from the ledger's marks.
        """
        while self.entries:
            points: list[Point] = []
            tags: dict[str, str] = {}
            done: list[Entry] = []
            while self.entries:
                entry = self.entries[0]
                room = MAX_POINTS_PER_BATCH - len(points)
                if len(entry.points) > MAX_POINTS_PER_BATCH and not points:
                    # a huge event on its own: send a full slice now, keep the rest in the entry
                    points = entry.points[:MAX_POINTS_PER_BATCH]
                    yield points, {}, []
                    entry.points = entry.points[MAX_POINTS_PER_BATCH:]
                    self.points -= len(points)
                    points = []
                    continue
                if len(entry.points) > room or (tags and len(tags) + len(entry.tags) > MAX_TAGS_PER_BATCH):
                    break
                points += entry.points
                tags.update(entry.tags)
                done.append(self.entries.popleft())
            self.points -= len(points)
            yield points, tags, done
        self.points = 0
        self.since = None
