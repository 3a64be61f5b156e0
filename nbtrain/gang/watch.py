"""The stall and hang watch of a supervised gang: who stopped making progress, their stacks, and when it is a hang.

Reads the ranks' progress reports (heartbeats with ``idle_s``, RANK_START and RANK_DONE, kept in
:class:`nbtrain.gang.facts.RankFacts`) and judges them with :func:`nbtrain.backends.hang.assess`. A stall is
reported once as a NOTICE (and again when its culprits change, or when progress resumes); the stalled ranks on
this machine are asked to dump their stacks (:mod:`nbtrain.backends.local.stacks`), shown below the stall in the
status detail. A stall that lasts ``--hang-timeout`` is a hang: :meth:`StallWatch.watch` says so, and
:meth:`StallWatch.hang_failure` is the verdict's failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from nbtrain.backends.hang import Assessment, RankProgress, assess
from nbtrain.backends.local import stacks
from nbtrain.events import EventKind, EventWriter
from nbtrain.gang.facts import LAST_LINES, RankFacts
from nbtrain.model import Failure

__all__ = ["STACKS_WAIT_S", "StallWatch"]

STACKS_WAIT_S = 0.5  # how long a stall's detail waits for the signalled ranks' stack dumps


def _gist(stall: Assessment | None) -> tuple[str, tuple[int, ...], tuple[int, ...]] | None:
    """What a stall notice reports: a change of it is reported again (the idle seconds are not)."""
    return None if stall is None else (stall.kind, stall.stalled, stall.culprits)


class StallWatch:
    """The stall state of one attempt. ``changed`` is called whenever the status detail should be rewritten."""

    def __init__(self, facts: RankFacts, *, world: int, stall_after: float, hang_timeout: float | None,
                 logs_dir: Path, node_of: dict[int, int], out: EventWriter, changed: Callable[[], None]) -> None:
        self.facts, self.world, self.stall_after, self.hang_timeout = facts, world, stall_after, hang_timeout
        self.logs_dir, self.node_of, self.out, self.changed = logs_dir, node_of, out, changed
        self.stall: Assessment | None = None
        self.stall_stacks = ""  # the stalled ranks' stacks, once dumped: shown below the stall in the detail
        self.stacks_due: dict[int, float] = {}  # rank asked for its stacks -> when to stop waiting for them

    @property
    def detail(self) -> str:
        """The status detail of the current stall ("" when making progress)."""
        return f"stalled: {self.stall.message}{self.stall_stacks}" if self.stall is not None else ""

    @property
    def stalled(self) -> list[int]:
        """The stalled ranks ([] when making progress)."""
        return list(self.stall.stalled) if self.stall is not None else []

    def assess(self) -> Assessment | None:
        """The hang assessment from the ranks' latest progress reports (None: making progress)."""
        if self.stall_after <= 0:
            return None
        now = time.time()
        facts = self.facts
        reports = {
            rank: RankProgress(rank=rank, idle_s=float(data.get("idle_s") or 0) + max(0.0, now - at),
                               collectives=int(data.get("collectives") or 0), in_collective=data.get("in_collective"),
                               step=data.get("step"), done=rank in facts.done,
                               progressed=bool(data.get("progressed", True)))
            for rank, (at, data) in facts.beats.items()
        }
        for rank in facts.done:
            reports.setdefault(rank, RankProgress(rank=rank, idle_s=0.0, done=True))
        for rank, at in facts.rank_started.items():  # started, no heartbeat yet: idle since its start
            reports.setdefault(rank, RankProgress(rank=rank, idle_s=max(0.0, now - at), progressed=False))
        return assess(reports, world=self.world, stall_after=self.stall_after)

    def watch(self) -> bool:
        """Report a stall (or its end) once; True when it has lasted ``--hang-timeout``."""
        assessment = self.assess()
        if _gist(assessment) != _gist(self.stall):  # a new stall, or new culprits (a late rank's first report)
            self.stall_stacks, self.stacks_due = "", {}
            if assessment is not None:
                self._ask_stacks(assessment)
            self.stall = assessment
            self.out.emit(EventKind.NOTICE, message=f"stalled: {assessment.message}" if assessment else
                          "progress resumed: every rank is making progress again",
                          stalled=list(assessment.stalled) if assessment else [])  # the monitor's grid marks them
            self.changed()
        if self.stacks_due:
            self._show_stacks()
        if assessment is None or self.hang_timeout is None:
            return False
        self.stall = assessment
        now = time.time()
        beats, started = self.facts.beats, self.facts.rank_started
        idle = min(float(beats[r][1].get("idle_s") or 0) + now - beats[r][0] if r in beats
                   else now - started.get(r, now) for r in assessment.stalled)
        return idle >= self.hang_timeout

    def _ask_stacks(self, assessment: Assessment) -> None:
        """Signal the stalled ranks on this machine to dump every thread's stack into their logs (see ``stacks``)."""
        for rank in assessment.stalled:
            who = self.facts.listeners.get(rank)
            if who is not None and rank not in self.facts.done:
                inside = self.facts.beats.get(rank, (0.0, {}))[1].get("in_collective")
                why = f"waiting in {inside}" if inside else "outside any collective"
                if stacks.request_stacks(self.logs_dir / f"rank-{rank}.log", rank, who, f"{why}, stalled"):
                    self.stacks_due[rank] = time.time() + STACKS_WAIT_S

    def _show_stacks(self) -> None:
        """Once the asked ranks had time to dump their stacks (a C handler: microseconds), show them in the detail."""
        if time.time() < max(self.stacks_due.values()):
            return
        dumps = stacks.collect(self.logs_dir, list(self.stacks_due))
        self.stacks_due = {}
        self.stall_stacks = f"\n\nstacks of the stalled ranks:\n{stacks.render(dumps)}" if dumps else ""
        self.changed()

    def hang_failure(self) -> Failure:
        """The verdict's failure once :meth:`watch` said the stall lasted ``--hang-timeout``."""
        from nbtrain.backends.storecursor import tail_lines  # verdict-time only: not on the way to the launchers

        assert self.stall is not None
        culprit = self.stall.culprits[0] if self.stall.culprits else None
        return Failure(
            reason=f"hung: {self.stall.message} (--hang-timeout {self.hang_timeout:g} s)",
            rank=culprit, node=self.node_of.get(culprit) if culprit is not None else None,
            traceback=stacks.render(stacks.collect(self.logs_dir, self.stall.stalled)) or None,
            last_lines=tuple(tail_lines(self.logs_dir / f"rank-{culprit}.log", LAST_LINES)) if culprit is not None else (),
        )
