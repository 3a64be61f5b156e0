"""Is a gang hung, and why (pure): progress reports of the ranks in, an assessment out.

Thread liveness says nothing (a heartbeat thread keeps beating while the main thread is blocked in a
collective), so each rank reports *progress*: its step, how many collectives it has issued, the one it is
inside (if any) and how long it has made no progress (``nbtrain.runtime.progress``). From those:

- not every rank has started (reported RANK_START): not judged;
- a rank that has made no progress yet is idle since it started (the threshold counts from its RANK_START, so
  imports and rendezvous get the same allowance as any step): one that never started progressing while
  others did, or a whole gang silent since it started, is judged like any other stall;
- no rank stalled, or the stalled ranks wait in a collective that ranks still making progress have not
  reached yet (stragglers): not hung;
- some unfinished rank has made no progress for ``stall_after`` seconds while others did, or the whole gang
  is silent: **stalled**. Then, naming what a user can act on:
  - ranks stuck *outside* any collective (in their own code) while others wait inside one: those ranks are
    the cause (``stuck``);
  - every waiting rank is inside a collective but they issued different numbers of collectives (one rank
    skipped an all-reduce, or finished while a peer waits): **desynchronised** collectives, naming the
    ranks behind;
  - all wait in the same collective: a peer is gone or the network is down (``waiting``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Assessment", "RankProgress", "assess", "desync_at_failure", "effective_stall_after"]


@dataclass(frozen=True)
class RankProgress:
    """The latest progress report of one rank. ``idle_s``: seconds without progress, as of ``now`` (for a rank
    that has made none yet, ``progressed=False``: seconds since it started)."""

    rank: int
    idle_s: float
    collectives: int = 0
    in_collective: str | None = None
    step: int | None = None
    done: bool = False
    progressed: bool = True  # made any progress yet (before that the rank is warming up)


@dataclass(frozen=True)
class Assessment:
    """A stalled gang. ``kind``: "stuck", "desync" or "waiting"; ``culprits``: the ranks to look at first."""

    kind: str
    stalled: tuple[int, ...]
    culprits: tuple[int, ...]
    message: str
    collective: str | None = None


def _ranks(ranks: tuple[int, ...] | list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in sorted(ranks))


def _where(p: RankProgress) -> str:
    if p.done:
        return f"rank {p.rank} finished after {p.collectives} collective(s)"
    if p.in_collective:
        return f"rank {p.rank} waits in {p.in_collective} #{p.collectives}"
    if not p.progressed:
        return f"rank {p.rank} is in its own code, outside any collective, and made no progress since it started"
    step = f" (last step {p.step})" if p.step is not None else ""
    return f"rank {p.rank} is in its own code, outside any collective{step}"


def assess(reports: Mapping[int, RankProgress], *, world: int, stall_after: float) -> Assessment | None:
    """The assessment of ``reports`` (one per rank that has reported); see the module docstring."""
    if len(reports) < world or stall_after <= 0:
        return None  # not every rank is up yet: starting, not hanging
    running = [p for p in reports.values() if not p.done]
    stalled = sorted(p.rank for p in running if p.idle_s >= stall_after)
    if not stalled:
        return None
    moving = [p for p in running if p.idle_s < stall_after]
    waiting = [p for p in running if p.in_collective]
    outside = [reports[r] for r in stalled if not reports[r].in_collective]
    idle = max(reports[r].idle_s for r in stalled)
    silent = all(not p.progressed for p in running)
    head = (f"{_ranks(stalled)} made no progress for {idle:.0f} s"
            + (" (the whole gang has been silent since it started)" if silent and len(stalled) == len(running) else ""))
    where = "; ".join(_where(reports[r]) for r in sorted(reports))
    if outside and waiting:
        culprits = tuple(p.rank for p in outside)
        collective = waiting[0].in_collective
        message = (f"{head}: {_ranks(list(culprits))} stuck outside any collective while "
                   f"{_ranks([p.rank for p in waiting])} wait in {collective}; {where}")
        return Assessment("stuck", tuple(stalled), culprits, message, collective)
    if waiting:
        issued = {p.rank: p.collectives for p in reports.values()}
        lowest_waiting = min(p.collectives for p in waiting)
        if moving and max(p.collectives for p in moving) < lowest_waiting:
            return None  # stragglers still on their way to the collective the others wait in
        if len(set(issued.values())) > 1 or len({p.in_collective for p in waiting}) > 1:
            fewest = min(issued.values())
            behind = tuple(sorted(r for r, n in issued.items() if n == fewest))
            message = (f"desynchronised collectives: {head}; the ranks issued different collectives ({where}): "
                       f"{_ranks(list(behind))} skipped or missed a collective the others entered")
            return Assessment("desync", tuple(stalled), behind, message, waiting[0].in_collective)
        if moving:
            return None  # the same collective, and the others are still making progress towards it
        collective = waiting[0].in_collective
        message = (f"{head}: every rank waits in {collective} #{waiting[0].collectives}; a peer is gone or the "
                   "network between nodes is down")
        return Assessment("waiting", tuple(stalled), tuple(stalled), message, collective)
    message = f"{head}: {where}"
    return Assessment("stuck", tuple(stalled), tuple(stalled), message)


def effective_stall_after(stall_after: float | None, hang_timeout: float | None) -> float:
    """The stall threshold in force: ``--stall-after``, lowered to ``--hang-timeout`` (a hang is a stall first)."""
    values = [float(v) for v in (stall_after, hang_timeout) if v]
    return min(values) if values else 0.0


def desync_at_failure(failed_rank: int, failed_in: str | None, issued: Mapping[int, int],
                      finished: frozenset[int] | set[int] = frozenset()) -> str | None:
    """Why a rank that failed inside a collective failed, when the ranks had issued different collectives.

    A rank that skips an all-reduce leaves its peer waiting in one the others never enter; with gloo the
    peer then fails with a closed connection when the skipping rank exits. That is a desync, not a network
    error: say so, naming the ranks behind. None when the counts agree or the failure was not in a collective.
    """
    if failed_in is None or len(set(issued.values())) <= 1 or failed_rank not in issued:
        return None
    fewest = min(issued.values())
    behind = sorted(r for r, n in issued.items() if n == fewest)
    counts = ", ".join(f"rank {r}: {n}" + (" (finished)" if r in finished else "") for r, n in sorted(issued.items()))
    return (f"desynchronised collectives: rank {failed_rank} failed in {failed_in} #{issued[failed_rank]} while "
            f"{_ranks(behind)} issued fewer collectives ({counts}); a rank skipped or added a collective")
