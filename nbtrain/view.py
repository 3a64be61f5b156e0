"""Folds a run's events into a small in-memory picture (pure): state, metrics, ranks, failure.

Fed by the watcher (or a one-off sync); every event is applied once, keyed by (source, attempt, seq).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nbtrain.events import Event, EventKind
from nbtrain.model import Failure, RunState

__all__ = ["RankInfo", "RunView"]


@dataclass
class RankInfo:
    """What is known about one global rank in the latest attempt."""

    rank: int
    node: int | None = None
    pid: int | None = None
    host: str | None = None
    last_step: int | None = None
    last_seen: float | None = None
    done: bool = False
    error: str | None = None
    env: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunView:
    """Aggregated state of one run. ``metrics[rank][name]`` is a list of (attempt, step, value)."""

    state: RunState = RunState.PENDING
    attempt: int = 0
    started: float | None = None
    ended: float | None = None
    failure: Failure | None = None
    total: int | None = None
    notices: list[str] = field(default_factory=list)
    ranks: dict[int, RankInfo] = field(default_factory=dict)
    metrics: dict[int, dict[str, list[tuple[int, int, float]]]] = field(default_factory=dict)
    last_seq: dict[tuple[str, int], int] = field(default_factory=dict)
    result_b64: str | None = None
    attempts: dict[int, dict[str, Any]] = field(default_factory=dict)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)

    def apply(self, event: Event) -> bool:
        """Fold one event in; False when it was already applied (duplicate).

        Each source writes its events in sequence order, so a (source, attempt) high-water mark is
        enough to drop duplicates in constant memory, however long the run.
        """
        stream = (event.source, event.attempt)
        if event.seq <= self.last_seq.get(stream, 0):
            return False
        self.last_seq[stream] = event.seq
        kind, data = event.kind, event.data
        self._record_history(event)
        if event.attempt < self.attempt and kind is not EventKind.METRIC:
            return True  # an older attempt's state/ranks/failure no longer describe the run
        if event.attempt > self.attempt:
            self.attempt = event.attempt
            self.ranks.clear()
            self.failure = None
            self.result_b64 = None  # the result is the latest attempt's
        if kind is EventKind.STATE:
            state = RunState(data["state"])
            if data.get("retrying"):  # this attempt failed, the next one is being started
                state = RunState.STARTING
            if not self.state.terminal or event.attempt >= self.attempt:
                self.state = state
            if state is RunState.STARTING and self.started is None:
                self.started = event.time
            if state.terminal:
                self.ended = event.time
        elif kind is EventKind.FAILURE:
            self.failure = Failure.from_dict(data)
        elif kind is EventKind.RESULT:
            # ``Run.result()`` unpickles this: only rank 0's own result of this attempt counts, once.
            payload = data.get("pickle_b64")
            if event.rank == 0 and event.source == "rank-0" and self.result_b64 is None and isinstance(payload, str):
                self.result_b64 = payload
        elif kind is EventKind.NOTICE:
            message = str(data.get("message", ""))
            if message and message not in self.notices:
                self.notices.append(message)
        elif event.rank is not None:
            info = self.ranks.setdefault(event.rank, RankInfo(event.rank))
            info.last_seen = event.time
            if kind is EventKind.RANK_START:
                info.node, info.pid, info.host = data.get("node"), data.get("pid"), data.get("host")
            elif kind is EventKind.ENV:
                info.env = dict(data)
            elif kind is EventKind.METRIC:
                step = int(data["step"])
                info.last_step = step
                if data.get("total") is not None:
                    self.total = int(data["total"])
                series = self.metrics.setdefault(event.rank, {})
                for name, value in data.get("values", {}).items():
                    series.setdefault(name, []).append((event.attempt, step, float(value)))
            elif kind is EventKind.HEARTBEAT:
                if data.get("step") is not None:
                    info.last_step = int(data["step"])
            elif kind is EventKind.RANK_DONE:
                info.done = True
            elif kind is EventKind.RANK_ERROR:
                info.error = f"{data.get('exc_type')}: {data.get('message')}"
        return True

    def _record_history(self, event: Event) -> None:
        """Per-attempt verdicts and the checkpoint list, kept for every attempt (not only the latest)."""
        if event.kind is EventKind.CHECKPOINT and event.rank in (0, None):
            entry = {"step": int(event.data["step"]), "path": event.data.get("path"), "time": event.time,
                     "attempt": event.attempt, "bytes": event.data.get("bytes")}
            self.checkpoints = [c for c in self.checkpoints if c["step"] != entry["step"]] + [entry]
            self.checkpoints.sort(key=lambda c: c["step"])
        elif event.kind is EventKind.STATE:
            history = self.attempts.setdefault(event.attempt, {"attempt": event.attempt, "state": "starting",
                                                                "started": event.time, "failure": None})
            history["state"] = event.data["state"]
            if RunState(event.data["state"]).terminal:
                history["ended"] = event.time
        elif event.kind is EventKind.FAILURE:
            history = self.attempts.setdefault(event.attempt, {"attempt": event.attempt, "state": "failed",
                                                                "started": None, "failure": None})
            history["failure"] = dict(event.data)

    def last_metrics(self, rank: int = 0) -> dict[str, float]:
        """The latest value of every metric of ``rank``."""
        return {name: points[-1][2] for name, points in self.metrics.get(rank, {}).items() if points}
