"""Folds a run's events into a small in-memory picture (pure): state, metrics, ranks, failure.

Fed by the watcher (or a one-off sync); every event is applied once, keyed by (source, attempt, seq).
Memory stays bounded however long the run: each metric of each rank is a :class:`MetricSeries` (exact up to
a limit, then min/max-decimated over steps, the latest point always exact); the full history stays in the
event files (:func:`metric_history` folds it from there).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from nbtrain.events import Event, EventKind
from nbtrain.metricpoints import event_step, metric_values
from nbtrain.model import Failure, RunState

__all__ = ["METRIC_POINTS", "MetricSeries", "RankInfo", "RunView", "metric_history"]

METRIC_POINTS = 1024  # points kept in memory per (rank, metric): 20 bytes each


class MetricSeries(Sequence[tuple[int, int, float]]):
    """One metric of one rank as ``(attempt, step, value)`` points, in bounded memory (20 bytes a point).

    Every point is kept, in report order, up to ``limit`` points. One more compacts the series: the points
    go into step buckets of a power-of-two width, chosen so that they fill at most half of ``limit``, and
    each bucket keeps its lowest and its highest value (min/max decimation: spikes survive). The width only
    grows, so the whole history stays evenly resolved over steps, and compactions get rarer as it does
    (amortised constant time per point). Points added after a compaction follow in report order.

    ``last`` is the latest point added, always exact. ``restarts`` (a chart's view): a point at a step at or
    below the latest one first drops the points from that step on, as a restart from a checkpoint does on
    the chart; the series is then always sorted by step. Otherwise every attempt's points are kept.
    """

    __slots__ = ("_attempts", "_ordered", "_steps", "_values", "added", "last", "limit", "restarts", "width")

    def __init__(self, limit: int = METRIC_POINTS, *, restarts: bool = False) -> None:
        self.limit = max(8, limit)
        self.restarts = restarts
        self.width = 1  # step bucket width of the last compaction (1: never compacted)
        self.added = 0  # points added, ever
        self.last: tuple[int, int, float] | None = None
        self._attempts = array("q")
        self._steps = array("q")
        self._values = array("d")
        self._ordered = True  # steps never went down since the last compaction

    def add(self, attempt: int, step: int, value: float) -> None:
        """Append one point (compacting first when the series is full)."""
        steps = self._steps
        if steps and step <= steps[-1]:
            if self.restarts:
                self._truncate(bisect_left(steps, step))
            elif step < steps[-1]:
                self._ordered = False
        self._attempts.append(attempt)
        self._steps.append(step)
        self._values.append(value)
        self.added += 1
        self.last = (attempt, step, value)
        if len(self._steps) > self.limit:
            self._compact()

    def points(self) -> list[tuple[float, float]]:
        """``(step, value)`` pairs, as charts take them."""
        return [(float(s), v) for s, v in zip(self._steps, self._values, strict=True)]

    def _truncate(self, start: int) -> None:
        del self._attempts[start:], self._steps[start:], self._values[start:]

    def _compact(self) -> None:
        steps, values = self._steps, self._values
        count = len(steps)
        # positions in step order (report order within a step); mostly in order already
        order: Sequence[int] = range(count) if self._ordered else sorted(range(count), key=steps.__getitem__)
        low, high = steps[order[0]], steps[order[-1]]
        width, buckets = self.width, max(1, self.limit // 4)  # two points a bucket: at most half the limit
        while high // width - low // width + 1 > buckets:
            width *= 2
        self.width = width
        kept: list[int] = []  # positions, in step order
        bucket, lowest, highest = None, -1, -1
        for i in order:
            key = steps[i] // width
            if key != bucket:
                if bucket is not None:
                    kept.extend(_in_order(lowest, highest, steps))
                bucket, lowest, highest = key, i, i
            elif values[i] < values[lowest]:
                lowest = i
            elif values[i] > values[highest]:
                highest = i
        kept.extend(_in_order(lowest, highest, steps))
        latest = count - 1
        if latest not in kept:  # the latest point stays exact
            kept.insert(bisect_left([steps[i] for i in kept], steps[latest]), latest)
        self._attempts = array("q", [self._attempts[i] for i in kept])
        self._steps = array("q", [steps[i] for i in kept])
        self._values = array("d", [values[i] for i in kept])
        self._ordered = True

    def __len__(self) -> int:
        return len(self._steps)

    def __iter__(self) -> Iterator[tuple[int, int, float]]:
        return zip(self._attempts, self._steps, self._values, strict=True)

    @overload
    def __getitem__(self, index: int) -> tuple[int, int, float]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[int, int, float]]: ...

    def __getitem__(self, index: int | slice) -> tuple[int, int, float] | list[tuple[int, int, float]]:
        if isinstance(index, slice):
            return list(self)[index]
        return (self._attempts[index], self._steps[index], self._values[index])

    def __repr__(self) -> str:
        return f"MetricSeries({len(self)} of {self.added} points, step width {self.width})"


def _in_order(a: int, b: int, steps: array[int]) -> tuple[int, ...]:
    """Positions ``a`` and ``b`` (once when equal) in step order, then position order."""
    if a == b:
        return (a,)
    return (a, b) if (steps[a], a) < (steps[b], b) else (b, a)


def metric_history(events: Iterable[Event], rank: int) -> dict[str, list[tuple[int, float]]]:
    """Every metric ``rank`` reported, folded from ``events`` (all of them, e.g. read from the event files):
    ``{name: [(step, value), ...]}`` sorted by step; a later attempt's point replaces an earlier attempt's at
    the same step, and within an attempt the later report wins."""
    latest: dict[str, dict[int, tuple[int, float]]] = {}
    for event in events:
        if event.kind is not EventKind.METRIC or event.rank != rank:
            continue
        step = event_step(event.data)
        if step is None:  # a bad stored point (nbtrain.log refuses it): skipped, never fatal
            continue
        for name, value in metric_values(event.data):
            points = latest.setdefault(name, {})
            if step not in points or event.attempt >= points[step][0]:
                points[step] = (event.attempt, value)
    return {name: [(step, value) for step, (_, value) in sorted(points.items())] for name, points in latest.items()}


@dataclass
class RankInfo:
    """What is known about one global rank in the latest attempt."""

    rank: int
    node: int | None = None
    pid: int | None = None
    host: str | None = None
    last_step: int | None = None
    last_seen: float | None = None
    last_progress: float | None = None  # its last step, metric or finished collective (its start before any)
    stalled: bool = False  # named in the supervisor's latest stall notice
    done: bool = False
    error: str | None = None
    env: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunView:
    """Aggregated state of one run. ``metrics[rank][name]`` is a :class:`MetricSeries` of (attempt, step, value),
    every attempt's points, bounded to ``metric_points`` points (decimated beyond, the latest exact)."""

    state: RunState = RunState.PENDING
    attempt: int = 0
    started: float | None = None
    ended: float | None = None
    failure: Failure | None = None
    total: int | None = None
    notices: list[str] = field(default_factory=list)
    #: the current attempt's warm gang, from the supervisor's notices: gang, generation, recycled (cold: empty)
    warm: dict[str, Any] = field(default_factory=dict)
    ranks: dict[int, RankInfo] = field(default_factory=dict)
    metrics: dict[int, dict[str, MetricSeries]] = field(default_factory=dict)
    last_seq: dict[tuple[str, int], int] = field(default_factory=dict)
    result_b64: str | None = None
    attempts: dict[int, dict[str, Any]] = field(default_factory=dict)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    metric_points: int = METRIC_POINTS
    #: ``init_trackers(config=...)`` as rank 0 reported it (flattened names, values as text; unmasked: mask to show)
    params: dict[str, str] = field(default_factory=dict)

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
        if event.attempt < self.attempt:
            return True  # an older attempt's state/ranks/failure no longer describe the run (its metrics are kept)
        if event.attempt > self.attempt:
            self.attempt = event.attempt
            self.ranks.clear()
            self.warm = {}
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
            if isinstance(data.get("warm"), dict) and event.source == "supervisor":  # gang, generation, recycled
                self.warm.update(data["warm"])
            if isinstance(data.get("stalled"), list):  # the supervisor's stall notice (an empty list: resumed)
                for rank in data["stalled"]:
                    self.ranks.setdefault(int(rank), RankInfo(int(rank)))
                for info in self.ranks.values():
                    info.stalled = info.rank in data["stalled"]
        elif kind is EventKind.PARAMS:
            if event.rank == 0 and isinstance(data.get("values"), dict):
                self.params.update({str(k): str(v) for k, v in data["values"].items()})
        elif event.rank is not None:
            info = self.ranks.setdefault(event.rank, RankInfo(event.rank))
            info.last_seen = event.time
            if kind is EventKind.RANK_START:
                info.node, info.pid, info.host = data.get("node"), data.get("pid"), data.get("host")
                info.last_progress = event.time
            elif kind is EventKind.ENV:
                info.env = dict(data)
            elif kind is EventKind.METRIC:
                info.last_step = event_step(data) if event_step(data) is not None else info.last_step
                info.last_progress = event.time
                if isinstance(data.get("total"), int):
                    self.total = int(data["total"])
            elif kind is EventKind.HEARTBEAT:  # progress: the step the rank is at, metrics or not
                if data.get("step") is not None:
                    info.last_step = int(data["step"])
                if isinstance(data.get("idle_s"), (int, float)):  # seconds since its last progress (runtime.progress)
                    info.last_progress = event.time - float(data["idle_s"])
            elif kind is EventKind.RANK_DONE:
                info.done = True
                if data.get("step") is not None:
                    info.last_step = int(data["step"])
            elif kind is EventKind.RANK_ERROR:
                info.error = f"{data.get('exc_type')}: {data.get('message')}"
        return True

    def _record_history(self, event: Event) -> None:
        """Per-attempt verdicts, the checkpoint list and the metrics, kept for every attempt (not only the latest)."""
        if event.kind is EventKind.METRIC and event.rank is not None:
            step = event_step(event.data)
            series = self.metrics.setdefault(event.rank, {})
            for name, value in metric_values(event.data):
                if step is None:  # a bad stored point (nbtrain.log refuses it): skipped, never fatal
                    break
                points = series.get(name)
                if points is None:
                    points = series[name] = MetricSeries(self.metric_points)
                points.add(event.attempt, step, value)
        elif event.kind is EventKind.CHECKPOINT and event.rank in (0, None):
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
        return {name: series.last[2] for name, series in self.metrics.get(rank, {}).items() if series.last}
