"""What adoption statistics are computed from, and what they are (frozen dataclasses; pure).

Input: :class:`RunFacts` (one run, with its :class:`AttemptFacts`), read from a store by
:mod:`nbtrain.stats.collect`. Output: :class:`Stats`, built by :func:`nbtrain.stats.compute.compute_stats` and
rendered by :mod:`nbtrain.stats.render` (text, JSON) and :mod:`nbtrain.stats.prometheus`. Every figure's exact
definition is in docs/stats.md.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["AttemptFacts", "AttemptKind", "BackendUsage", "Recovery", "RunFacts", "Stats", "Summary", "UserStats"]


class AttemptKind(str, enum.Enum):
    """How an attempt of a run was started."""

    SUBMIT = "submit"  # attempt 0: the cell, function or job directory submitted
    RESUME = "resume"  # a user's resume (``%nbtrain resume``, ``--resume RUN``, POST …/resume)
    RESTART = "restart"  # an automatic restart after a failure (``--max-restarts``)
    OTHER = "other"  # a relaunch of another kind recorded by a newer nbtrain


@dataclass(frozen=True)
class AttemptFacts:
    """One launch of a run's gang. Times are epoch seconds; None when the store does not have them.

    ``submitted``: when the notebook side recorded the attempt (automatic restarts have none);
    ``all_ranks_started``: the latest of the ranks' first ``rank_start`` events, when every rank has one;
    ``started``/``ended``: the supervisor's (or Kubernetes mirror's) status times; ``state``: its last state;
    ``checkpoint_before``: a complete checkpoint from an earlier attempt existed when this one started.
    """

    number: int
    kind: AttemptKind
    state: str
    submitted: float | None = None
    all_ranks_started: float | None = None
    started: float | None = None
    ended: float | None = None
    checkpoint_before: bool = False


@dataclass(frozen=True)
class RunFacts:
    """One run of one user, as the statistics see it.

    ``job``: what "the same job" means for recovery times: ``notebook-path#cell-id`` when the run was
    submitted from a notebook cell whose id the kernel knew, else the run's name (``--name``, default the
    cell's or function's). ``profile``: the template/profile the run used; None when it used none, and
    ``profile_recorded`` False when this nbtrain's records do not keep profiles at all.
    """

    run_id: str
    user: str
    job: str
    backend: str
    created: float
    nodes: int
    procs: int
    gpu: bool
    state: str
    attempts: tuple[AttemptFacts, ...] = ()
    profile: str | None = None
    profile_recorded: bool = False

    @property
    def world_size(self) -> int:
        """``nodes * procs``."""
        return self.nodes * self.procs


@dataclass(frozen=True)
class Summary:
    """Count, mean, median, 90th percentile and maximum of some durations in seconds (None when count is 0)."""

    count: int = 0
    total: float = 0.0
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    max: float | None = None


@dataclass(frozen=True)
class UserStats:
    """Time to first distributed run of one user (over every run of theirs, whatever the window)."""

    user: str
    runs: int
    first_run: float
    first_distributed_success: float | None
    time_to_first_distributed_s: float | None


@dataclass(frozen=True)
class Recovery:
    """Failure streaks of one job and how long each took to end in a success (``recovered_s`` None: not yet)."""

    job: str
    user: str
    failed_at: float
    recovered_at: float | None
    recovered_s: float | None


@dataclass(frozen=True)
class BackendUsage:
    """Gang time on one backend: process-hours = nodes x procs x running hours, summed over attempts;
    GPU-hours = the same for runs whose spec asked for GPUs (``--device gpu``) only."""

    backend: str
    runs: int
    attempts: int
    process_hours: float
    gpu_hours: float


@dataclass(frozen=True)
class Stats:
    """Every adoption figure over the runs created in ``[window_start, now]`` (``window_start`` None: all runs)."""

    now: float
    window_start: float | None
    users: tuple[UserStats, ...]
    runs: int
    succeeded: int
    failed: int
    cancelled: int
    live: int
    success_rate: float | None
    recoveries: tuple[Recovery, ...]
    time_to_recover: Summary
    unrecovered: int
    queue_wait: Summary
    templates_recorded: bool
    template_runs: int
    template_share: float | None
    resumed_attempts: int
    resumed_from_checkpoint: int
    resumed_from_checkpoint_succeeded: int
    checkpoint_recovery_rate: float | None
    backends: tuple[BackendUsage, ...]
