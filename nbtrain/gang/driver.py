"""The driver protocol: what an engine that runs gangs tells the one supervise loop (:mod:`nbtrain.gang.engine`).

The engine (:class:`nbtrain.gang.engine.Engine`) owns everything every engine shares: reading the ranks' events,
the PID watch, the verdict (:func:`nbtrain.backends.verdict.decide`), the stall/hang watch, the triage of the first
failure, ``status.json`` and ``events/supervisor.jsonl``, the full-disk reserve, and restarts
(:mod:`nbtrain.gang.restarts`). A driver says only how ITS gang starts, what its nodes' state is, how it ends,
and what it knows that the ranks cannot say. Drivers today: the local process gang
(:class:`nbtrain.backends.local.supervisor.LocalGang`, the worked example of docs/backends.md), Slurm ``srun``
steps (:class:`nbtrain.backends.slurm.supervisor.SrunGang`), warm agents (:class:`nbtrain.warm.supervisor.WarmGang`).

Writing the next driver (warm gangs on a cluster, Ray):

1. Subclass :class:`DriverDefaults` (every hook but :meth:`GangDriver.start`, :meth:`GangDriver.nodes` and
   :meth:`GangDriver.end` has a default that is right for a gang of local processes) and take the engine in
   ``__init__``: ``make_driver(engine)`` is what :func:`nbtrain.gang.engine.supervise` is given. Read the
   attempt through the engine's public attributes (``plan``: the :class:`nbtrain.gang.request.GangRequest`,
   ``dir``, ``run_id``, ``identity``, ``out``, ``facts``, ``cancel_requested``, ``state``); never write
   ``status.json`` or the supervisor's events yourself.
2. ``start(tmp)``: start one launcher per node of ``plan.launchers`` (its ``argv``, ``env`` over this
   process's environment, ``cwd``), with ``TMPDIR=tmp`` and :data:`nbtrain.runtime.watchdog.ENV_SUPERVISOR` set
   to ``engine.identity`` (ranks end themselves when the supervisor dies). Return quickly: the launchers are on
   the path from the user's submit to the first step. Ranks write their events and logs into the attempt's
   ``events/`` and ``logs/`` (the rank environment: :func:`nbtrain.runtime.rankenv.rank_env`).
3. ``nodes()``: per node of the plan, ``(pid, exit_code)`` of what stands for its launcher (None while it runs);
   the verdict reads them (every launcher ended, cleanly or not) and ``status.json`` shows them.
4. ``end()``: end the whole gang, every node, within a few seconds; idempotent; returns the processes ended.
5. Optional: ``refresh`` (pull facts before each poll: exit codes from an agent), ``watched_pid`` (a PID that
   means nothing on this machine is 0), ``exit_code`` (a vanished rank's code the driver knows), ``evidence``
   (refine the triaged failure), ``on_signal`` (what SIGTERM means here), ``observe`` (adjust the observation:
   a cooperative stop), ``conclude`` (write a verdict the rules cannot), ``before_verdict`` (last word on the
   verdict: where a restart runs), ``status_fields`` (extra ``status.json`` fields for the backend's readers),
   ``placement``/``may_still_restart`` (restarts, :mod:`nbtrain.gang.restarts`), ``close`` (after the attempt).
6. Run it: a ``main`` that calls :func:`nbtrain.gang.engine.supervise` with the attempt directory, the driver and
   how the next attempt is planned (the backend's :meth:`nbtrain.backends.base.Backend.plan_restart`); the
   backend's ``submit`` starts that program detached, and its ``status`` reads ``status.json``.

Every hook runs on the engine's one thread (the signal handler too: it only sets flags).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from nbtrain.backends.verdict import Decision, Observation, Rules
from nbtrain.events import Event
from nbtrain.gang.restarts import Restart
from nbtrain.model import Failure, RunState

if TYPE_CHECKING:
    from nbtrain.gang.engine import Engine

__all__ = ["RULES", "DriverDefaults", "GangDriver"]

# failure_settle: collect near-simultaneous rank errors before ending the gang; done_grace: all ranks done but a
# launcher lingers (elastic agent shutdown): end it after this long; cancel: ending the gang is synchronous here.
RULES = Rules(done_grace_s=3.0, failure_settle_s=0.3, cancel_wait_s=0.0)


class GangDriver(Protocol):
    """How one engine starts, observes and ends its gang (see the module docstring: the guide)."""

    rules: Rules

    def start(self, tmp: Path) -> None:
        """Start every node's launcher; ``tmp`` is the attempt's TMPDIR. Raise when the gang cannot start."""
        ...

    def nodes(self) -> list[tuple[int, int | None]]:
        """``(pid, exit_code)`` per node (exit code None while the node's launcher runs); [] before start."""
        ...

    def end(self) -> int:
        """End the whole gang (idempotent); the number of processes ended."""
        ...

    def refresh(self) -> None:
        """Pull the driver's own facts before the engine reads the ranks' events (each poll)."""
        ...

    def watched_pid(self, rank: int, pid: int, event: Event) -> int:
        """The PID to watch for ``rank`` from its RANK_START ``event`` (0: not watchable from this machine)."""
        ...

    def exit_code(self, rank: int) -> int | None:
        """The exit code of ``rank``'s process when the driver knows it (None: unknown)."""
        ...

    def evidence(self, chosen: Failure) -> Failure:
        """The triaged failure, refined by what the driver saw (e.g. a node that died first)."""
        ...

    def on_signal(self, signum: int) -> None:
        """SIGTERM/SIGINT reached the supervisor: set the engine's flags (never block, never write)."""
        ...

    def observe(self, seen: Observation) -> Observation:
        """The observation the verdict rules read, adjusted by the driver."""
        ...

    def conclude(self, decision: Decision) -> bool:
        """Write a verdict the shared rules cannot (through ``engine.finish``); True when it did (or deferred it)."""
        ...

    def before_verdict(self, state: RunState, reason: str, failure: Failure | None) -> tuple[str, Failure | None]:
        """The verdict's reason and failure, amended (``engine.state`` is already ``state``)."""
        ...

    def status_fields(self) -> dict[str, Any]:
        """Extra fields of ``status.json`` for the backend's readers."""
        ...

    def placement(self) -> Restart:
        """Where a FAILED attempt would restart (:mod:`nbtrain.gang.restarts`)."""
        ...

    def may_still_restart(self) -> bool:
        """After the pause before a restart in place: nothing ended the gang's place meanwhile."""
        ...

    def close(self) -> None:
        """After the attempt, whatever its end (close files, give shared resources back)."""
        ...


class DriverDefaults:
    """Defaults right for a gang of processes on this machine (see :class:`GangDriver`)."""

    rules: Rules = RULES

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def refresh(self) -> None:
        """See :meth:`GangDriver.refresh`: nothing to pull."""
        return None

    def watched_pid(self, rank: int, pid: int, event: Event) -> int:
        """See :meth:`GangDriver.watched_pid`: every rank runs on this machine."""
        return pid

    def exit_code(self, rank: int) -> int | None:
        """See :meth:`GangDriver.exit_code`: unknown (read from the zombie when possible)."""
        return None

    def evidence(self, chosen: Failure) -> Failure:
        """See :meth:`GangDriver.evidence`: the ranks' evidence stands."""
        return chosen

    def on_signal(self, signum: int) -> None:
        """See :meth:`GangDriver.on_signal`: a signal is the user's cancel."""
        self.engine.cancel_requested = True

    def observe(self, seen: Observation) -> Observation:
        """See :meth:`GangDriver.observe`: as observed."""
        return seen

    def conclude(self, decision: Decision) -> bool:
        """See :meth:`GangDriver.conclude`: the shared rules write every verdict."""
        return False

    def before_verdict(self, state: RunState, reason: str, failure: Failure | None) -> tuple[str, Failure | None]:
        """See :meth:`GangDriver.before_verdict`: unchanged."""
        return reason, failure

    def status_fields(self) -> dict[str, Any]:
        """See :meth:`GangDriver.status_fields`: none."""
        return {}

    def placement(self) -> Restart:
        """See :meth:`GangDriver.placement`: the supervisor restarts the gang itself."""
        return Restart.IN_PLACE

    def may_still_restart(self) -> bool:
        """See :meth:`GangDriver.may_still_restart`: nothing else ends a local gang's place."""
        return True

    def close(self) -> None:
        """See :meth:`GangDriver.close`: nothing to give back."""
        return None
