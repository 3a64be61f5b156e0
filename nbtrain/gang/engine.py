"""The one supervise loop of a gang attempt, whatever engine runs the gang (its driver: :mod:`nbtrain.gang.driver`).

:class:`Engine` runs one attempt described by ``plan.json`` in its directory: the driver starts the gang, then
every :data:`POLL_S` the engine reads the ranks' events (:class:`nbtrain.gang.facts.RankFacts`), watches their
PIDs, the stall/hang watch (:class:`nbtrain.gang.watch.StallWatch`) and the driver's nodes, and lets
:func:`nbtrain.backends.verdict.decide` say when to end the gang and what the verdict is. It picks the first
failing rank across nodes (:func:`nbtrain.gang.evidence.first_failure`) and writes the verdict to
``status.json`` and ``events/supervisor.jsonl``: only the engine writes those two files.

Verdict rules: SUCCEEDED when every launcher exits 0 or every rank reported RANK_DONE (a clean run whose teardown
aborts is still a success); CANCELLED on request; FAILED otherwise, with the reason. A full store disk is a
FAILED verdict that says so (a reserve file keeps room for it).

:func:`supervise` runs attempts until a verdict that is not followed by a restart here
(:mod:`nbtrain.gang.restarts`), then exits with it.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from nbtrain.backends.hang import effective_stall_after
from nbtrain.backends.verdict import Cause, Clock, Decision, Observation, decide
from nbtrain.events import EventKind, EventWriter, FileTail, parse_line
from nbtrain.gang import restarts
from nbtrain.gang.driver import GangDriver
from nbtrain.gang.evidence import first_failure
from nbtrain.gang.facts import RankFacts
from nbtrain.gang.files import AttemptLayout
from nbtrain.gang.procs import pid_gone
from nbtrain.gang.request import GangRequest
from nbtrain.gang.watch import StallWatch
from nbtrain.model import Failure, RunState
from nbtrain.runtime import watchdog
from nbtrain.store import PRIVATE_UMASK, write_json_atomic

__all__ = ["POLL_S", "RESTART_DELAY_S", "Engine", "supervise"]

POLL_S = 0.1
RESTART_DELAY_S = 1.0
RESERVE = ".verdict-reserve"  # freed when the disk is full, so the verdict can be written
RESERVE_BYTES = 256 * 1024


class Engine:
    """Supervises one attempt in ``attempt_dir`` with the driver ``make_driver(engine)``; see the module docstring.

    ``request_type``: the request type whose ``plan.json`` the attempt directory holds (a :class:`GangRequest`, or
    a backend's extension of it, e.g. :class:`nbtrain.backends.slurm.request.SlurmRequest`); ``plan`` is that
    request.
    """

    def __init__(self, attempt_dir: Path, make_driver: Callable[[Engine], GangDriver],
                 request_type: type[GangRequest] = GangRequest) -> None:
        self.dir = attempt_dir
        self.files = AttemptLayout(attempt_dir)
        self.plan: GangRequest = request_type.load(self.files.plan)
        self.run_id = self.plan.run_id
        self.world = self.plan.world_size
        self.attempt = self.plan.attempt
        self.restart_budget = self.plan.restart_budget
        self.events_dir = self.plan.events_dir
        self.logs_dir = self.plan.logs_dir
        self.out = EventWriter(self.events_dir / "supervisor.jsonl", "supervisor", attempt=self.attempt)
        self.node_of = {rank: launcher.node for launcher in self.plan.launchers for rank in launcher.ranks}
        self.tails = {r: FileTail(self.events_dir / f"rank-{r}.jsonl") for r in range(self.world)}
        self.facts = RankFacts()
        self.cancel_requested = False
        self.started = time.time()
        self.state = RunState.STARTING
        self.identity = watchdog.identity()
        hang = self.plan.hang_timeout_s
        self.hang_timeout: float | None = float(hang) if hang else None
        self.watch = StallWatch(self.facts, world=self.world, node_of=self.node_of, logs_dir=self.logs_dir,
                                stall_after=effective_stall_after(self.plan.stall_after_s, self.hang_timeout),
                                hang_timeout=self.hang_timeout, out=self.out, changed=self.write_status)
        self.driver = make_driver(self)

    # -- restarts ---------------------------------------------------------------------------------
    @property
    def will_retry(self) -> bool:
        """A FAILED verdict of this attempt is followed by an automatic restart (``--max-restarts``)."""
        return restarts.will_retry(state=self.state, cancelled=self.cancel_requested, attempt=self.attempt,
                                   restart_budget=self.restart_budget, placement=self.driver.placement())

    def restarts_here(self) -> bool:
        """After :meth:`run`: this process starts the next attempt (:func:`supervise`)."""
        return restarts.restarts_here(state=self.state, cancelled=self.cancel_requested, attempt=self.attempt,
                                      restart_budget=self.restart_budget, placement=self.driver.placement())

    # -- status -----------------------------------------------------------------------------------
    def write_status(self, failure: Failure | None = None, ended: float | None = None) -> None:
        """Write ``status.json`` (the verdict once ``ended``): what every reader of the attempt trusts."""
        write_json_atomic(self.files.status, {
            "state": self.state.value,
            "attempt": self.attempt,
            "started": self.started,
            "ended": ended,
            "failure": failure.to_dict() if failure else None,
            "retrying": self.will_retry,
            "supervisor_pid": os.getpid(),
            "supervisor": self.identity,
            "launchers": [{"node": i, "pid": pid, "exit_code": code} for i, (pid, code) in enumerate(self.driver.nodes())],
            "updated": time.time(),
            "detail": self.watch.detail,
            "stalled": self.watch.stalled,
            **self.driver.status_fields(),
        })

    def set_state(self, state: RunState, reason: str = "") -> None:
        """Move to ``state`` (not a verdict): an event and ``status.json``."""
        self.state = state
        self.out.emit(EventKind.STATE, state=state.value, reason=reason)
        self.write_status()

    def notice(self, text: str, **data: Any) -> None:
        """A NOTICE event of the supervisor (the monitor shows it)."""
        self.out.emit(EventKind.NOTICE, message=text, **data)

    def prepare(self) -> Path:
        """Directories of the attempt and its notices, before anything starts; returns the attempt's TMPDIR."""
        tmp = self.plan.tmp_dir
        tmp.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        for notice in self.plan.notices:
            self.notice(notice)
        return tmp

    # -- observing --------------------------------------------------------------------------------
    def ingest(self) -> None:
        """Read what the ranks reported since the last poll; note ranks whose process is gone without a word."""
        self.driver.refresh()
        now, facts = time.time(), self.facts
        for rank, tail in self.tails.items():
            for line in tail.read_lines():
                event = parse_line(line)
                if event is not None:
                    facts.take(rank, event, self.driver.watched_pid)
        for rank, pid in facts.pids.items():
            if facts.settled(rank) or not pid:
                continue
            gone, code = pid_gone(pid)
            if gone:
                for line in self.tails[rank].read_lines():  # it may have reported just before exiting
                    event = parse_line(line)
                    if event is not None and event.kind is EventKind.RANK_DONE:
                        facts.done.add(rank)
                    elif event is not None and event.kind is EventKind.RANK_ERROR:
                        facts.errors.setdefault(rank, event)
                if rank not in facts.done and rank not in facts.errors:
                    facts.vanished[rank] = (now, code)
        for rank, (seen, code) in list(facts.vanished.items()):
            known = self.driver.exit_code(rank) if code is None else None
            if known is not None:
                facts.vanished[rank] = (seen, known)
        if self.state is RunState.STARTING and facts.pids:
            self.set_state(RunState.RUNNING)

    def observe(self, now: float) -> Observation:
        """What the verdict rules read now (adjusted by the driver)."""
        codes = [code for _, code in self.driver.nodes()]
        timeout = self.plan.timeout_s
        facts = self.facts
        return self.driver.observe(Observation(
            now=now, world=self.world, ranks_done=len(facts.done),
            rank_failed=bool(facts.errors or facts.vanished or self._launcher_failed(codes)),
            gang_ended=all(c is not None for c in codes), gang_clean=all(c == 0 for c in codes),
            cancel_requested=self.cancel_requested or self.files.cancel_request.exists(),
            timed_out=timeout is not None and time.time() - self.started > float(timeout),
            hung=self.watch.watch(),
            store_full=self._disk_full(),
        ))

    def _launcher_failed(self, codes: list[int | None]) -> bool:
        """A launcher exited non-zero while some of its ranks had not reported RANK_DONE."""
        for launcher, code in zip(self.plan.launchers, codes, strict=True):
            if code not in (None, 0) and not all(r in self.facts.done for r in launcher.ranks):
                return True
        return False

    def failure(self) -> Failure:
        """The first failure of the gang (the ranks' evidence, refined by the driver's)."""
        codes = [code for _, code in self.driver.nodes()]
        return self.driver.evidence(first_failure(self.facts, world=self.world, node_of=self.node_of,
                                                  logs_dir=self.logs_dir, codes=codes))

    # -- the loop ---------------------------------------------------------------------------------
    def run(self) -> RunState:
        """Supervise until a verdict (:func:`nbtrain.backends.verdict.decide`); returns the final state."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        clock = Clock()
        try:
            # The launchers first: everything before them is on the path from the user's submit to the first step
            # (the launchers then spend seconds importing Accelerate). The reserve and the first status follow at
            # once; until status.json exists readers see the attempt as starting, and a supervisor dying in between
            # is still found (the backend's status: no status, supervisor gone) and its gang ended.
            self.driver.start(self.prepare())
            self._reserve()
            self.write_status()
            self.out.emit(EventKind.STATE, state=RunState.STARTING.value, reason="")
            while True:
                time.sleep(POLL_S)
                self.ingest()
                decision = decide(self.observe(time.monotonic()), clock, self.driver.rules)
                clock = decision.clock
                if decision.end_gang:
                    self.driver.end()
                if decision.verdict is None:
                    continue
                # what the ranks wrote before their processes ended is evidence too: a launcher seen exiting
                # (observe) after this poll's read (ingest) may have had its ranks report first
                self.ingest()
                if decision.cause is Cause.RANK_FAILED and len(self.facts.done) >= self.world:
                    continue  # the settle window showed every rank done after all
                self.conclude(decision)
                return self.state
        except BaseException as error:
            self.driver.end()
            if isinstance(error, OSError) and error.errno == errno.ENOSPC:
                failure = self._disk_full_failure(error)
            else:
                failure = Failure(reason=f"the nbtrain supervisor crashed: {type(error).__name__}: {error}")
            self.finish(RunState.FAILED, failure.reason, failure)
            if failure.reason.startswith("no space left"):
                return self.state
            raise
        finally:
            shutil.rmtree(self.plan.tmp_dir, ignore_errors=True)
            self._release_reserve()
            self.driver.close()

    def _on_signal(self, signum: int, frame: object) -> None:
        self.driver.on_signal(signum)

    def conclude(self, decision: Decision) -> None:
        """Write the verdict ``decision`` reached (the driver first, for verdicts the rules cannot write)."""
        if self.driver.conclude(decision):
            return
        state = decision.verdict
        assert state is not None
        if state is RunState.CANCELLED:
            self.finish(state, "cancelled by the user")
        elif decision.cause is Cause.STORE_FULL:
            failure = self._disk_full_failure(None)
            self.finish(state, failure.summary(), failure)
        elif decision.cause is Cause.HANG:
            failure = self.watch.hang_failure()
            self.finish(state, failure.summary(), failure)
        elif decision.cause is Cause.TIMEOUT:
            failure = Failure(reason=f"the run exceeded its timeout of {self.plan.timeout_s} s (--timeout)")
            self.finish(state, failure.reason, failure)
        elif state is RunState.SUCCEEDED:
            self.finish(state, "every rank finished; lingering launchers ended" if decision.end_gang else "")
        else:
            failure = self._disk_full_failure(None) if self._disk_full() else self.failure()
            self.finish(state, failure.summary(), failure)

    def finish(self, state: RunState, reason: str = "", failure: Failure | None = None) -> None:
        """Write the verdict ``state``: the FAILURE and STATE events, then ``status.json``."""
        self.state = state
        reason, failure = self.driver.before_verdict(state, reason, failure)
        ended = time.time()
        if self.will_retry:
            reason = f"{reason}; restarting from the last checkpoint (attempt {self.attempt + 1} of " \
                     f"{self.restart_budget})"
        try:
            if failure is not None:
                self.out.emit(EventKind.FAILURE, **failure.to_dict())
            self.out.emit(EventKind.STATE, state=state.value, reason=reason, retrying=self.will_retry)
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
            failure = self._disk_full_failure(error)  # the verdict file still fits: it is what readers trust
        self.write_status(failure=failure, ended=ended)

    # -- a full disk ------------------------------------------------------------------------------
    def _reserve(self) -> None:
        """Set aside a little space so the verdict can still be written when the store's disk fills up."""
        with open(self.dir / RESERVE, "wb") as handle:
            handle.write(b"\0" * RESERVE_BYTES)
            handle.flush()
            os.fsync(handle.fileno())

    def _release_reserve(self) -> None:
        (self.dir / RESERVE).unlink(missing_ok=True)

    def _disk_full(self) -> bool:
        try:
            return shutil.disk_usage(self.dir).free < RESERVE_BYTES
        except OSError:
            return False

    def _disk_full_failure(self, error: OSError | None) -> Failure:
        self._release_reserve()  # room for the verdict
        where = getattr(error, "filename", None) or str(self.dir)
        return Failure(reason=f"no space left on device at {where} (the nbtrain store is full); free space there or "
                              f"set NBTRAIN_HOME to a disk with room, then resume the run")


def supervise(attempt_dir: Path, make_driver: Callable[[Engine], GangDriver],
              advance: Callable[[GangRequest], Path], request_type: type[GangRequest] = GangRequest) -> NoReturn:
    """Supervise attempts from ``attempt_dir`` until a verdict that is not followed by a restart here; exit with it.

    ``make_driver`` builds the attempt's driver; ``advance`` plans and writes the next attempt from the failed one's
    request (through the backend's ``plan_restart``) and returns its directory. ``request_type``: what each
    attempt's ``plan.json`` holds (see :class:`Engine`).
    """
    # The store is private (nbtrain.store): what this process, its launchers and their ranks write (status, logs,
    # events, result.pkl, checkpoints in the run directory) is this user's only, whatever the kernel's umask.
    os.umask(PRIVATE_UMASK)
    while True:
        engine = Engine(attempt_dir, make_driver, request_type)
        state = engine.run()
        if not engine.restarts_here():
            break
        time.sleep(RESTART_DELAY_S)
        if not engine.driver.may_still_restart():
            break
        if engine.cancel_requested or AttemptLayout(attempt_dir).cancel_request.exists():
            engine.cancel_requested = True  # a cancel during the pause: no restart
            engine.finish(RunState.CANCELLED, "cancelled by the user while restarting")
            state = RunState.CANCELLED
            break
        attempt_dir = advance(engine.plan)
    sys.exit(0 if state is RunState.SUCCEEDED else 1)
