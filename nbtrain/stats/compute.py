"""``compute_stats``: the adoption figures of a list of runs (pure: no I/O, no clock; ``now`` is an argument)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence

from nbtrain.model import is_terminal
from nbtrain.stats.model import (
    AttemptFacts,
    AttemptKind,
    BackendUsage,
    Recovery,
    RunFacts,
    Stats,
    Summary,
    UserStats,
)

__all__ = ["compute_stats", "summarise"]

_SUCCEEDED, _FAILED, _CANCELLED = "succeeded", "failed", "cancelled"


def summarise(values: Iterable[float]) -> Summary:
    """Count, total, mean, nearest-rank median and 90th percentile, and maximum of ``values``."""
    ordered = sorted(values)
    if not ordered:
        return Summary()
    total = math.fsum(ordered)

    def rank(p: float) -> float:
        return ordered[max(0, math.ceil(p * len(ordered)) - 1)]

    return Summary(count=len(ordered), total=total, mean=total / len(ordered), p50=rank(0.5), p90=rank(0.9),
                   max=ordered[-1])


def compute_stats(runs: Sequence[RunFacts], now: float, since: float | None = None) -> Stats:
    """The adoption figures of ``runs`` at ``now`` over the window of the last ``since`` seconds (None: all).

    The window holds the runs *created* in ``[now - since, now]``; every figure but the users' time to first
    distributed run is computed over those runs only. The time to first distributed run is a lifetime figure:
    it uses every run given (a user's first run may lie before the window). Runs of several users (stores
    merged by a platform team) are told apart by :attr:`RunFacts.user`; recoveries are per user and job.
    Definitions: docs/stats.md.
    """
    if since is not None and since < 0:
        raise ValueError(f"since={since!r}: expected a number of seconds >= 0 (or None for every run).")
    start = None if since is None else now - since
    window = [r for r in runs if start is None or r.created >= start]
    states = [r.state for r in window]
    succeeded, failed, cancelled = (states.count(s) for s in (_SUCCEEDED, _FAILED, _CANCELLED))
    recoveries = _recoveries(window)
    recovered = [r.recovered_s for r in recoveries if r.recovered_s is not None]
    resumed = [a for r in window for a in r.attempts if a.kind in (AttemptKind.RESUME, AttemptKind.RESTART)]
    from_checkpoint = [a for a in resumed if a.checkpoint_before]
    ckpt_ok = sum(1 for a in from_checkpoint if a.state == _SUCCEEDED)
    recorded = any(r.profile_recorded for r in window)
    template_runs = sum(1 for r in window if r.profile)
    return Stats(
        now=now, window_start=start, users=_users(runs), runs=len(window),
        succeeded=succeeded, failed=failed, cancelled=cancelled,
        live=sum(1 for s in states if not is_terminal(s)),
        success_rate=_ratio(succeeded, succeeded + failed),
        recoveries=recoveries, time_to_recover=summarise(recovered),
        unrecovered=sum(1 for r in recoveries if r.recovered_s is None),
        queue_wait=summarise(_queue_waits(window)),
        templates_recorded=recorded, template_runs=template_runs,
        template_share=_ratio(template_runs, len(window)) if recorded else None,
        resumed_attempts=len(resumed), resumed_from_checkpoint=len(from_checkpoint),
        resumed_from_checkpoint_succeeded=ckpt_ok, checkpoint_recovery_rate=_ratio(ckpt_ok, len(from_checkpoint)),
        backends=_backends(window, now),
    )


def _ratio(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _grouped(runs: Sequence[RunFacts], key: Callable[[RunFacts], str]) -> dict[str, list[RunFacts]]:
    """``runs`` by ``key`` (a user, a backend), each group in the order given."""
    groups: dict[str, list[RunFacts]] = defaultdict(list)
    for run in runs:
        groups[key(run)].append(run)
    return groups


def _users(runs: Sequence[RunFacts]) -> tuple[UserStats, ...]:
    by_user = _grouped(runs, lambda run: run.user)
    out = []
    for user in sorted(by_user):
        mine = by_user[user]
        first = min(r.created for r in mine)
        wins = [a.ended for r in mine if r.world_size >= 2 for a in r.attempts
                if a.state == _SUCCEEDED and a.ended is not None]
        win = min(wins) if wins else None
        out.append(UserStats(user=user, runs=len(mine), first_run=first, first_distributed_success=win,
                             time_to_first_distributed_s=None if win is None else max(0.0, win - first)))
    return tuple(out)


def _recoveries(window: Sequence[RunFacts]) -> tuple[Recovery, ...]:
    """Failure streaks per (user, job): the first failed attempt of a streak to the next succeeded attempt.

    Attempts are ordered by the time they ended; cancelled and unfinished attempts neither start nor end a streak.
    """
    outcomes: dict[tuple[str, str], list[tuple[float, str]]] = defaultdict(list)
    for run in window:
        for attempt in run.attempts:
            if attempt.state in (_SUCCEEDED, _FAILED) and attempt.ended is not None:
                outcomes[(run.user, run.job)].append((attempt.ended, attempt.state))
    found = []
    for (user, job), events in sorted(outcomes.items()):
        failed_at: float | None = None
        for ended, state in sorted(events):
            if state == _FAILED and failed_at is None:
                failed_at = ended
            elif state == _SUCCEEDED and failed_at is not None:
                found.append(Recovery(job=job, user=user, failed_at=failed_at, recovered_at=ended,
                                      recovered_s=ended - failed_at))
                failed_at = None
        if failed_at is not None:
            found.append(Recovery(job=job, user=user, failed_at=failed_at, recovered_at=None, recovered_s=None))
    return tuple(sorted(found, key=lambda r: (r.failed_at, r.user, r.job)))


def _queue_waits(window: Sequence[RunFacts]) -> list[float]:
    return [max(0.0, a.all_ranks_started - a.submitted) for r in window for a in r.attempts
            if a.submitted is not None and a.all_ranks_started is not None]


def _running_seconds(attempt: AttemptFacts, now: float) -> float:
    if attempt.started is None:
        return 0.0
    end = attempt.ended if attempt.ended is not None else (now if not is_terminal(attempt.state) else None)
    return max(0.0, end - attempt.started) if end is not None else 0.0


def _backends(window: Sequence[RunFacts], now: float) -> tuple[BackendUsage, ...]:
    by_backend = _grouped(window, lambda run: run.backend)
    out = []
    for backend in sorted(by_backend):
        mine = by_backend[backend]
        hours = [(r.gpu, r.world_size * _running_seconds(a, now) / 3600.0) for r in mine for a in r.attempts]
        out.append(BackendUsage(backend=backend, runs=len(mine), attempts=sum(len(r.attempts) for r in mine),
                                process_hours=math.fsum(h for _, h in hours),
                                gpu_hours=math.fsum(h for gpu, h in hours if gpu)))
    return tuple(out)
