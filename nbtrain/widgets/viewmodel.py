"""What the monitor shows, computed from a run's events and log lines (pure: no widgets, no I/O).

``MonitorModel.ingest(batch)`` accumulates; the ``header``/``ranks``/``failure``/``env`` methods give the
small synced state (the run-level facts from a :class:`~nbtrain.model.RunSnapshot`, the per-rank ones from
a copy of each rank's :class:`~nbtrain.view.RankInfo`); ``take_batch()`` gives the bulk delta for one custom message
(bounded in size); ``snapshot()`` answers a (re)connecting browser. See PROTOCOL.md.

Cost per line: log lines arrive as blocks of bytes (one per rank per poll, ``batch.lines.blocks``) and are
kept as such in per-rank rings (:mod:`.logring`); only the lines a message carries are decoded. Memory is
bounded: ``kernel_lines`` lines (``snapshot_lines`` per rank in gangs of up to 40 ranks) and ``kept_points``
points per chart.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nbtrain.events import EventKind, LineBlock
from nbtrain.metricpoints import event_step, metric_values
from nbtrain.model import Batch, LogPage, RunSnapshot, RunState
from nbtrain.view import MetricSeries, RankInfo
from nbtrain.widgets.decimate import decimate
from nbtrain.widgets.logring import LogRings, blocks_of

__all__ = ["MAX_PAGE", "MonitorLimits", "MonitorModel", "page_reply", "page_request", "rank_states"]

MAX_PAGE = 1000  # lines per ``page`` reply (PROTOCOL.md)


@dataclass(frozen=True)
class MonitorLimits:
    """Bounds that keep the browser and the kernel responsive whatever the run does."""

    batch_lines: int = 400  # newest lines per custom message
    snapshot_lines: int = 500  # per rank, on (re)connect ...
    snapshot_total: int = 20_000  # ... and all ranks together (a 512-rank snapshot stays ~1 MB)
    kernel_lines: int = 20_000  # log lines a ring holds, all ranks together (at least 20 per rank): what a snapshot
    #                             shows (snapshot_total); the rings' bytes stay under 3x (logring.RankRing)
    merged_lines: int = 1000
    chart_points: int = 2000  # per metric key on screen
    kept_points: int = 8000  # per key kept for snapshots (then min/max-decimated over steps)
    stall_after_s: float = 20.0  # a running rank silent this long (not even a heartbeat) is "stalled"
    progress_stall_s: float = 300.0  # ... and one without progress this long (--stall-after's default)
    straggler_min_gap: int = 3  # steps behind the median before a rank is a straggler
    straggler_fraction: float = 0.1  # ... or this fraction of the median, whichever is larger


def page_request(before: int, limit: int) -> tuple[int, int]:
    """The (start, limit) of the log read that answers ``{"type": "page", "before": before, "limit": limit}``:
    the up to ``limit`` (1..MAX_PAGE) lines with indices ``< before``."""
    limit = max(1, min(MAX_PAGE, limit))
    end = max(0, before)
    start = max(0, end - limit)
    return start, end - start


def page_reply(rank: int, page: LogPage) -> dict[str, Any]:
    """The ``page`` message for a page read by line number (``page.start`` is an absolute index)."""
    return {"type": "page", "rank": rank, "start": page.start, "lines": list(page.lines), "eof": page.start == 0}


def rank_states(ranks: Mapping[int, RankInfo], nodes_count: int, procs: int, now: float, limits: MonitorLimits,
                run_state: RunState) -> dict[str, Any]:
    """The rank grid (PROTOCOL.md ``ranks``): per rank state, step, age and straggler flag, grouped by node.

    States: starting (not heard from), running, done, failed, stalled (named in the supervisor's stall notice,
    judged on progress with the run's ``--stall-after``; or running but without progress (a step, a metric, a
    finished collective: heartbeats say so) for ``limits.progress_stall_s``, or silent for
    ``limits.stall_after_s``), stopped (the run ended around a rank that neither finished nor failed). A straggler is a running rank whose step is behind the median by more
    than ``max(straggler_min_gap, straggler_fraction * median)``.
    """
    world_size = nodes_count * procs
    steps = [info.last_step for info in ranks.values() if info.last_step is not None and not info.error]
    median = int(statistics.median(steps)) if steps else None
    counts = dict.fromkeys(("starting", "running", "done", "failed", "stalled", "stopped", "straggler"), 0)
    nodes: dict[int, list[list[Any]]] = {}
    for rank in range(world_size):
        info = ranks.get(rank)
        age = round(now - info.last_seen, 1) if info and info.last_seen else None
        idle = now - info.last_progress if info and info.last_progress else None
        if info is None or (info.pid is None and info.last_step is None and not info.done and not info.error):
            state = "stopped" if run_state.terminal else "starting"
        elif info.error:
            state = "failed"
        elif info.done:
            state = "done"
        elif run_state.terminal:
            state = "stopped"
        elif info.stalled or (age is not None and age > limits.stall_after_s) or (
                idle is not None and idle > limits.progress_stall_s):
            state = "stalled"
        else:
            state = "running"
        step = info.last_step if info else None
        gap = max(limits.straggler_min_gap, limits.straggler_fraction * (median or 0))
        straggler = int(state == "running" and median is not None and step is not None and median - step > gap)
        counts[state] += 1
        counts["straggler"] += straggler
        node = info.node if info and info.node is not None else rank // procs
        nodes.setdefault(int(node), []).append([rank, state, step, age, straggler])
    return {
        "median_step": median,
        "counts": counts,
        "nodes": [{"node": n, "ranks": ranks} for n, ranks in sorted(nodes.items())],
    }


@dataclass
class MonitorModel:
    """Accumulates one run's batches into widget state. Not thread-safe: one caller (the watcher)."""

    run_id: str
    name: str
    backend: str
    nodes: int
    procs: int
    kernel_env: dict[str, str | None]
    limits: MonitorLimits = field(default_factory=MonitorLimits)
    series: dict[str, MetricSeries] = field(default_factory=dict)
    pending_points: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    seq: int = 0
    line_attempt: int = 0

    def __post_init__(self) -> None:
        self.logs = self._rings()

    @property
    def world_size(self) -> int:
        """Ranks in the gang."""
        return self.nodes * self.procs

    @property
    def line_counts(self) -> dict[int, int]:
        """Lines per rank so far (of the attempt whose logs are shown)."""
        return self.logs.counts()

    def recent(self, rank: int) -> list[tuple[int, str]]:
        """The newest lines of ``rank`` a snapshot shows, as ``(index, text)``: ``snapshot_lines``, fewer in a
        gang so large that all ranks together would pass ``snapshot_total`` (at least 20)."""
        limits = self.limits
        return self.logs.recent(rank, min(limits.snapshot_lines, max(20, limits.snapshot_total // self.world_size)))

    def _rings(self) -> LogRings:
        # a rank's ring holds what a snapshot shows and what one batch may send, within the kernel's budget
        limits = self.limits
        wanted = max(limits.snapshot_lines, limits.batch_lines)
        return LogRings(min(wanted, max(20, limits.kernel_lines // self.world_size)), limits.merged_lines)

    # -- accumulate -------------------------------------------------------------------------------
    def ingest(self, batch: Batch) -> None:
        """Take the new lines (in bulk when the cursor read them so) and rank-0 metric points of ``batch``."""
        blocks: Sequence[LineBlock] | None = getattr(batch.lines, "blocks", None)  # storecursor.LogLines
        if blocks is None:
            counts = {(rank, self.line_attempt): n for rank, n in self.line_counts.items()}
            blocks = blocks_of(((line.rank, line.attempt, line.text) for line in batch.lines), counts)
        for block in blocks:
            if block.attempt > self.line_attempt:
                # a new attempt writes new log files: indices restart, so they stay positions on disk
                self.line_attempt = block.attempt
                self.logs = self._rings()
            elif block.attempt < self.line_attempt:
                continue
            self.logs.add(block)
        for event in batch.events:
            if event.kind is not EventKind.METRIC or event.rank != 0:
                continue
            step = event_step(event.data)
            if step is None:  # a bad stored point (nbtrain.log refuses it): skipped, never fatal
                continue
            for key, value in metric_values(event.data):
                self.add_point(key, event.attempt, step, value)

    def add_point(self, key: str, attempt: int, step: int, value: float, *, send: bool = True) -> None:
        """One rank-0 point of chart ``key`` (``send``: also in the next batch message)."""
        series = self.series.get(key)
        if series is None:
            series = self.series[key] = MetricSeries(self.limits.kept_points, restarts=True)
        series.add(attempt, step, value)
        if send:
            self.pending_points.setdefault(key, []).append((float(step), value))

    # -- bulk -------------------------------------------------------------------------------------
    def take_batch(self) -> dict[str, Any] | None:
        """The custom ``batch`` message for everything pending, or None when nothing is new."""
        if not self.logs.pending and not self.pending_points:
            return None
        lines, skipped = self.logs.take(self.limits.batch_lines)
        points = {k: decimate(v, self.limits.chart_points) for k, v in self.pending_points.items()}
        self.seq += 1
        message = {
            "type": "batch",
            "seq": self.seq,
            "points": {k: [list(p) for p in v] for k, v in points.items()},
            "lines": lines,
            "dropped": {str(r): n for r, n in skipped.items()},
        }
        self.pending_points.clear()
        return message

    def snapshot(self) -> dict[str, Any]:
        """The ``snapshot`` message: decimated series and the last lines of every rank and of the merged view."""
        return {
            "type": "snapshot",
            "points": {k: [list(p) for p in decimate(v.points(), self.limits.chart_points)]
                       for k, v in self.series.items()},
            "lines": {str(r): [list(x) for x in self.recent(r)] for r in sorted(self.logs.rings)},
            "merged": [list(x) for x in self.logs.merged()],
        }

    # -- small state ------------------------------------------------------------------------------
    def header(self, snapshot: RunSnapshot, ranks: Mapping[int, RankInfo], *, now: float | None = None,
               tracking_url: str | None = None, stopping: bool = False) -> dict[str, Any]:
        """The ``header`` trait: the run's facts from ``snapshot``, the device from rank 0's environment."""
        env0 = ranks[0].env if 0 in ranks else {}
        device = str(env0.get("device") or "")
        state = snapshot.state
        return {
            "run_id": self.run_id, "name": self.name, "backend": self.backend,
            "nodes": self.nodes, "procs": self.procs, "world_size": self.world_size,
            "device": "gpu" if device.startswith("cuda") else ("cpu" if device else "unknown"),
            "state": state.value, "started": snapshot.started,
            "ended": snapshot.ended if state.terminal else None,  # a resumed run's earlier end is not its end
            "now": time.time() if now is None else now,
            "step": snapshot.step, "total": snapshot.total,
            "attempt": snapshot.attempt, "notices": list(snapshot.notices),
            "detail": snapshot.detail.strip() if not state.terminal else "",
            "tracking_url": tracking_url, "can_resume": snapshot.can_resume,
            "stopping": stopping and not state.terminal,
            "warm": None if snapshot.warm is None else {"gang": snapshot.warm.gang,
                                                        "generation": snapshot.warm.generation,
                                                        "recycled": snapshot.warm.recycled},
        }

    def ranks(self, ranks: Mapping[int, RankInfo], state: RunState, *, now: float | None = None) -> dict[str, Any]:
        """The ``ranks`` trait."""
        return rank_states(ranks, self.nodes, self.procs, time.time() if now is None else now, self.limits, state)

    @staticmethod
    def failure(snapshot: RunSnapshot) -> dict[str, Any]:
        """The ``failure`` trait: {} unless the run failed."""
        if snapshot.state is not RunState.FAILED or snapshot.failure is None:
            return {}
        f = snapshot.failure
        return {
            "summary": f.summary(), "rank": f.rank, "node": f.node, "exit_code": f.exit_code, "signal": f.signal,
            "reason": f.reason, "exc_type": f.exc_type, "message": f.message, "traceback": f.traceback,
            "last_lines": list(f.last_lines),
        }

    def env(self, ranks: Mapping[int, RankInfo]) -> dict[str, Any]:
        """The ``env`` trait: each rank's versions next to the kernel's, mismatches flagged."""
        rows = []
        for rank in sorted(ranks):
            env = ranks[rank].env
            if not env:
                continue
            mismatch = [k for k in ("python", "torch", "accelerate")
                        if self.kernel_env.get(k) and env.get(k) and _base(env[k]) != _base(self.kernel_env[k])]
            rows.append({"rank": rank, "host": env.get("host"), "python": env.get("python"), "torch": env.get("torch"),
                         "accelerate": env.get("accelerate"), "device": env.get("device"),
                         "gpu_name": env.get("gpu_name"), "mismatch": mismatch})
        return {"kernel": dict(self.kernel_env), "ranks": rows, "mismatches": sum(1 for r in rows if r["mismatch"])}


def _base(version: Any) -> str:
    """Compare versions without local build tags: '2.13.0+cpu' == '2.13.0'."""
    return str(version).split("+", 1)[0]
