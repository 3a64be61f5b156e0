"""The one verdict rule of every backend (pure): observations of a gang in, a decision out.

Every backend's controller (the local supervisor, the Kubernetes mirror, …) runs a thin loop: observe the
gang, call :func:`decide`, act on the decision (end the gang, record the verdict). The rules, in order:

0. the store's disk is full: what the gang reports is being lost, so it is ended; FAILED, naming the disk
   (even when every rank finished: their output did not all reach the store);
1. every rank reported RANK_DONE: SUCCEEDED once the gang has exited and its logs are in the store, or after
   ``done_grace_s`` (a launcher
   or pod lingering in teardown is ended; a clean run whose teardown aborts is still a success);
2. the user cancelled: end the gang; CANCELLED once it is gone (or after ``cancel_wait_s``);
3. the run exceeded ``--timeout``: end the gang; FAILED; the gang made no progress for ``--hang-timeout``
   (:mod:`nbtrain.backends.hang`): end the gang; FAILED, naming the stuck ranks;
4. the gang ended by itself: once its logs are in the store (the record is complete and a failure report has
   the last lines), SUCCEEDED when every part exited cleanly, else FAILED;
5. a rank failed (reported an error, vanished, or its launcher/pod failed) while others run: wait
   ``failure_settle_s`` for near-simultaneous failures (so the first one is found across nodes), then
   end the gang; FAILED;
6. otherwise: no verdict yet.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from nbtrain.model import RunState

__all__ = ["Cause", "Clock", "Decision", "Observation", "Rules", "decide"]


class Cause(str, enum.Enum):
    """Why a decision was taken (what the controller reports as the reason)."""

    NONE = "none"
    DONE = "done"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    HANG = "hang"
    ENDED = "ended"
    RANK_FAILED = "rank-failed"
    STORE_FULL = "store-full"


@dataclass(frozen=True)
class Observation:
    """What a controller sees of its gang at one moment.

    ``gang_ended``: every process/pod of the gang has exited (or the workload is gone);
    ``gang_clean``: ... and each exited cleanly (launchers exit 0, the Job is Complete);
    ``rank_failed``: some rank reported an error, vanished without reporting, or its launcher/pod failed;
    ``hung``: the gang has made no progress for ``--hang-timeout`` seconds;
    ``store_full``: the store's disk is full (output of the gang is being lost);
    ``logs_drained``: every started rank's output is in the store (always true where ranks write it there; a
    controller that copies logs also says true once copying has made no progress for a while).
    """

    now: float
    world: int
    ranks_done: int = 0
    rank_failed: bool = False
    gang_ended: bool = False
    gang_clean: bool = False
    cancel_requested: bool = False
    timed_out: bool = False
    hung: bool = False
    store_full: bool = False
    logs_drained: bool = True


@dataclass(frozen=True)
class Rules:
    """A backend's grace periods (seconds)."""

    done_grace_s: float = 3.0
    failure_settle_s: float = 0.3
    cancel_wait_s: float = 45.0


@dataclass(frozen=True)
class Clock:
    """When each condition was first seen (the only memory :func:`decide` needs; kept by the caller)."""

    done_since: float | None = None
    cancel_since: float | None = None
    ended_since: float | None = None
    failed_since: float | None = None


@dataclass(frozen=True)
class Decision:
    """``verdict`` None: keep watching. ``end_gang``: the caller ends the gang now (before recording a verdict)."""

    verdict: RunState | None
    cause: Cause
    end_gang: bool
    clock: Clock

    @property
    def final(self) -> bool:
        """A verdict was reached."""
        return self.verdict is not None


def _since(value: float | None, now: float) -> float:
    return now if value is None else value


def decide(obs: Observation, clock: Clock, rules: Rules) -> Decision:
    """Apply the module's rules to ``obs``; see the module docstring."""
    now = obs.now
    if obs.store_full and not obs.cancel_requested:
        return Decision(RunState.FAILED, Cause.STORE_FULL, not obs.gang_ended, clock)
    if obs.world > 0 and obs.ranks_done >= obs.world:
        clock = replace(clock, done_since=_since(clock.done_since, now))
        assert clock.done_since is not None
        if obs.gang_ended and obs.logs_drained:
            return Decision(RunState.SUCCEEDED, Cause.DONE, False, clock)
        if obs.gang_ended:
            return Decision(None, Cause.DONE, False, clock)  # the record is complete once the logs are in
        if now - clock.done_since > rules.done_grace_s:
            return Decision(RunState.SUCCEEDED, Cause.DONE, True, clock)
        return Decision(None, Cause.DONE, False, clock)
    if obs.cancel_requested:
        clock = replace(clock, cancel_since=_since(clock.cancel_since, now))
        assert clock.cancel_since is not None
        if obs.gang_ended or now - clock.cancel_since > rules.cancel_wait_s:
            return Decision(RunState.CANCELLED, Cause.CANCELLED, not obs.gang_ended, clock)
        return Decision(None, Cause.CANCELLED, True, clock)
    if obs.timed_out:
        return Decision(RunState.FAILED, Cause.TIMEOUT, not obs.gang_ended, clock)
    if obs.hung and not obs.gang_ended:
        return Decision(RunState.FAILED, Cause.HANG, True, clock)
    if obs.gang_ended:
        clock = replace(clock, ended_since=_since(clock.ended_since, now))
        if not obs.logs_drained:
            return Decision(None, Cause.ENDED, False, clock)  # the record is complete once the logs are in
        return Decision(RunState.SUCCEEDED if obs.gang_clean else RunState.FAILED, Cause.ENDED, False, clock)
    if obs.rank_failed:
        clock = replace(clock, failed_since=_since(clock.failed_since, now))
        assert clock.failed_since is not None
        if now - clock.failed_since >= rules.failure_settle_s:
            return Decision(RunState.FAILED, Cause.RANK_FAILED, True, clock)
        return Decision(None, Cause.RANK_FAILED, False, clock)
    return Decision(None, Cause.NONE, False, clock)
