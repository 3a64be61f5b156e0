"""``nbtrain stats`` as text (for people) and as a JSON document (``--json``, ``GET /nbtrain/stats``); pure."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from nbtrain.model import json_safe
from nbtrain.stats.model import Stats, Summary

__all__ = ["Source", "duration", "to_json", "to_text"]

#: Where runs were read from: (store path, the user whose runs they are).
Source = tuple[str, str]


def duration(seconds: float | None) -> str:
    """``42.0 s``, ``17.5 min``, ``3.25 h``, ``30.0 d``; ``-`` for None."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h" if seconds < 2 * 86400 else f"{seconds / 86400:.1f} d"


def _n(count: int, word: str) -> str:
    """``1 run``, ``3 runs``."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(epoch))


def to_json(stats: Stats, sources: Sequence[Source] = ()) -> dict[str, Any]:
    """The JSON document of ``stats`` (strict JSON: no NaN); key by key in docs/stats.md."""
    recovered = [r for r in stats.recoveries if r.recovered_s is not None]
    return dict(json_safe({
        "now": stats.now,
        "window": {"start": stats.window_start,
                   "seconds": None if stats.window_start is None else stats.now - stats.window_start},
        "sources": [{"store": store, "user": user} for store, user in sources],
        "users": [asdict(u) for u in stats.users],
        "runs": {"total": stats.runs, "succeeded": stats.succeeded, "failed": stats.failed,
                 "cancelled": stats.cancelled, "live": stats.live, "success_rate": stats.success_rate},
        "recovery": {"incidents": len(stats.recoveries), "recovered": len(recovered),
                     "unrecovered": stats.unrecovered, "time_to_recover_s": asdict(stats.time_to_recover),
                     "incidents_list": [asdict(r) for r in stats.recoveries]},
        "queue_wait_s": asdict(stats.queue_wait),
        "templates": {"recorded": stats.templates_recorded, "runs": stats.template_runs,
                      "share": stats.template_share},
        "checkpoint_recovery": {"resumed_attempts": stats.resumed_attempts,
                                "from_checkpoint": stats.resumed_from_checkpoint,
                                "succeeded": stats.resumed_from_checkpoint_succeeded,
                                "rate": stats.checkpoint_recovery_rate},
        "backends": [asdict(b) for b in stats.backends],
    }))


def _summary(s: Summary, what: str) -> str:
    if not s.count:
        return f"no {what}s"
    return (f"{_n(s.count, what)}: mean {duration(s.mean)}, median {duration(s.p50)}, p90 {duration(s.p90)}, "
            f"max {duration(s.max)}")


def to_text(stats: Stats, sources: Sequence[Source] = ()) -> str:
    """A short report, one figure per line (definitions: docs/stats.md)."""
    window = ("every run" if stats.window_start is None else
              f"runs created since {_when(stats.window_start)} ({duration(stats.now - stats.window_start)})")
    lines = [f"nbtrain stats: {window}"]
    lines += [f"  store {store} (user {user})" for store, user in sources]
    lines.append("time to first distributed run (per user, every run):")
    if not stats.users:
        lines.append("  no runs")
    for u in stats.users:
        got = (duration(u.time_to_first_distributed_s) if u.time_to_first_distributed_s is not None
               else "no successful distributed run yet")
        lines.append(f"  {u.user}: {got} ({_n(u.runs, 'run')}, first {_when(u.first_run)})")
    lines.append(f"runs: {stats.runs} ({stats.succeeded} succeeded, {stats.failed} failed, "
                 f"{stats.cancelled} cancelled, {stats.live} not finished)")
    lines.append(f"success rate: {_percent(stats.success_rate)} (succeeded / (succeeded + failed))")
    recovered = stats.time_to_recover
    lines.append(f"time to recover: {_summary(recovered, 'recovered failure streak')}; "
                 f"{stats.unrecovered} not recovered yet")
    lines.append(f"queue wait (submitted -> all ranks started): {_summary(stats.queue_wait, 'attempt')}")
    if stats.templates_recorded:
        lines.append(f"templates: {stats.template_runs} of {stats.runs} runs ({_percent(stats.template_share)})")
    else:
        lines.append("templates: not recorded (the run records of this nbtrain keep no profile)")
    lines.append(f"checkpoint recovery: {stats.resumed_from_checkpoint_succeeded} of {stats.resumed_from_checkpoint} "
                 f"resumed attempts with a checkpoint succeeded ({_percent(stats.checkpoint_recovery_rate)}); "
                 f"{stats.resumed_attempts} resumed attempts in all")
    lines.append("gang time (nodes x procs x running time; GPU-hours: runs with --device gpu):")
    if not stats.backends:
        lines.append("  no runs")
    for b in stats.backends:
        lines.append(f"  {b.backend}: {b.process_hours:.3f} process-hours, {b.gpu_hours:.3f} GPU-hours "
                     f"({_n(b.runs, 'run')}, {_n(b.attempts, 'attempt')})")
    return "\n".join(lines)
