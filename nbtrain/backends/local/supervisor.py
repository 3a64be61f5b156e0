"""The detached supervisor of one local attempt: ``python -m nbtrain.backends.local.supervisor ATTEMPT_DIR``.

Started in its own session so it outlives the kernel. It starts one ``accelerate launch`` per node,
watches ranks (events and PIDs) and launchers, ends the whole gang when any rank fails (or on cancel =
SIGTERM to this process, or on timeout), picks the first failing rank across nodes, and writes the
verdict to ``status.json`` and ``events/supervisor.jsonl``. Only this process writes those two files.

Verdict rules: SUCCEEDED when every launcher exits 0 or every rank reported RANK_DONE (a clean run
whose teardown aborts is still a success); CANCELLED on request; FAILED otherwise, with the reason.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, NoReturn

from nbtrain.backends.hang import Assessment, RankProgress, assess, desync_at_failure, effective_stall_after
from nbtrain.backends.local import procs, stacks
from nbtrain.backends.verdict import Cause, Clock, Decision, Observation, Rules, decide
from nbtrain.events import Event, EventKind, EventWriter, FileTail, parse_line
from nbtrain.model import Failure, RunState
from nbtrain.runtime import watchdog
from nbtrain.store import PRIVATE_UMASK, read_json, write_json_atomic

POLL_S = 0.1
# failure_settle: collect near-simultaneous rank errors before ending the gang; done_grace: all ranks done but a
# launcher lingers (elastic agent shutdown): end it after this long; cancel: ending the gang is synchronous here.
RULES = Rules(done_grace_s=3.0, failure_settle_s=0.3, cancel_wait_s=0.0)
RESERVE = ".verdict-reserve"  # freed when the disk is full, so the verdict can be written
RESERVE_BYTES = 256 * 1024
LAST_LINES = 40
STACKS_WAIT_S = 0.5  # how long a stall's detail waits for the signalled ranks' stack dumps


def _pid_gone(pid: int) -> tuple[bool, int | None]:
    """(gone, exit_code): gone when the process no longer runs; exit code read from a zombie if possible."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True, None
    fields = stat.rsplit(")", 1)[-1].split()
    if fields and fields[0] in ("Z", "X"):
        code = None
        if len(fields) >= 50:  # field 52 of stat (exit_code, waitpid format), counted after "comm)"
            status = int(fields[-1])
            code = -(status & 0x7F) if status & 0x7F else (status >> 8) & 0xFF
        return True, code
    return False, None


def _die_with_parent() -> None:
    """In a launcher, before exec: SIGTERM it when the supervisor dies (Linux PR_SET_PDEATHSIG)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the ranks' own supervisor watchdog still ends the gang


def _gist(stall: Assessment | None) -> tuple[str, tuple[int, ...], tuple[int, ...]] | None:
    """What a stall notice reports: a change of it is reported again (the idle seconds are not)."""
    return None if stall is None else (stall.kind, stall.stalled, stall.culprits)


class Supervisor:
    """Runs one attempt described by ``plan.json`` in ``attempt_dir``; see the module docstring."""

    rules: Rules = RULES  # the verdict's timings (a warm gang's supervisor collects rank errors longer)

    def __init__(self, attempt_dir: Path) -> None:
        self.dir = attempt_dir
        self.plan: dict[str, Any] = read_json(attempt_dir / "plan.json")
        self.run_id: str = self.plan["run_id"]
        self.world: int = int(self.plan["world_size"])
        self.events_dir = Path(self.plan["events_dir"])
        self.logs_dir = Path(self.plan["logs_dir"])
        self.out = EventWriter(self.events_dir / "supervisor.jsonl", "supervisor", attempt=int(self.plan["attempt"]))
        self.node_of: dict[int, int] = {}
        for launcher in self.plan["launchers"]:
            for rank in launcher["ranks"]:
                self.node_of[int(rank)] = int(launcher["node"])
        self.tails = {r: FileTail(self.events_dir / f"rank-{r}.jsonl") for r in range(self.world)}
        self.pids: dict[int, int] = {}
        self.done: set[int] = set()
        self.errors: dict[int, Event] = {}
        self.vanished: dict[int, tuple[float, int | None]] = {}
        self.launchers: list[subprocess.Popen[bytes]] = []
        self.log_files: list[IO[bytes]] = []
        self.cancel_requested = False
        self.started = time.time()
        self.state = RunState.STARTING
        self.identity = watchdog.identity()
        self.beats: dict[int, tuple[float, dict[str, Any]]] = {}  # rank -> (time, progress report)
        self.final: dict[int, Event] = {}  # RANK_DONE of each finished rank (its final collective count)
        self.stall: Assessment | None = None
        self.rank_started: dict[int, float] = {}  # RANK_START times: a rank silent since then is idle since then
        self.listeners: dict[int, stacks.Listener | None] = {}  # ranks here that dump their stacks on a signal
        self.stall_stacks = ""  # the stalled ranks' stacks, once dumped: shown below the stall in the detail
        self.stacks_due: dict[int, float] = {}  # rank asked for its stacks -> when to stop waiting for them
        hang = self.plan.get("hang_timeout_s")
        self.hang_timeout: float | None = float(hang) if hang else None
        self.stall_after = effective_stall_after(self.plan.get("stall_after_s"), self.hang_timeout)

    # -- status -----------------------------------------------------------------------------------
    @property
    def will_retry(self) -> bool:
        """A FAILED verdict of this attempt is followed by an automatic restart (``--max-restarts``)."""
        return (self.state is RunState.FAILED and not self.cancel_requested
                and int(self.plan["attempt"]) < int(self.plan.get("restart_budget", 0)))

    def restarts_here(self) -> bool:
        """After :meth:`run`: this process starts the next attempt (:func:`supervise`); default: :attr:`will_retry`."""
        return self.will_retry

    def may_still_restart(self) -> bool:
        """After the pause before a restart: nothing ended the job meanwhile (a backend whose scheduler can end the
        allocation says so; a cancel is checked by :func:`supervise` itself)."""
        return True

    def _write_status(self, failure: Failure | None = None, ended: float | None = None) -> None:
        write_json_atomic(
            self.dir / "status.json",
            {
                "state": self.state.value,
                "attempt": self.plan["attempt"],
                "started": self.started,
                "ended": ended,
                "failure": failure.to_dict() if failure else None,
                "retrying": self.will_retry,
                "supervisor_pid": os.getpid(),
                "supervisor": self.identity,
                "launchers": [
                    {"node": i, "pid": p.pid, "exit_code": p.poll()} for i, p in enumerate(self.launchers)
                ],
                "updated": time.time(),
                "detail": f"stalled: {self.stall.message}{self.stall_stacks}" if self.stall is not None else "",
                "stalled": list(self.stall.stalled) if self.stall is not None else [],
            },
        )

    def _set_state(self, state: RunState, reason: str = "") -> None:
        self.state = state
        self.out.emit(EventKind.STATE, state=state.value, reason=reason)
        self._write_status()

    # -- launching --------------------------------------------------------------------------------
    def _prepare(self) -> Path:
        """Directories of the attempt and its notices, before anything starts; returns the attempt's TMPDIR."""
        tmp = Path(self.plan["tmp_dir"])
        tmp.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        for notice in self.plan.get("notices", []):
            self.out.emit(EventKind.NOTICE, message=notice)
        return tmp

    def _start(self) -> None:
        tmp = self._prepare()
        for launcher in self.plan["launchers"]:
            env = dict(os.environ)
            env.update(launcher["env"])
            env["TMPDIR"] = str(tmp)  # torchelastic leaves /tmp/torchelastic_* behind; keep them here
            env.pop("NBTRAIN_SUPERVISOR_OF", None)
            env[watchdog.ENV_SUPERVISOR] = self.identity  # ranks end themselves if this supervisor dies
            log = open(self.logs_dir / f"node-{launcher['node']}.log", "ab")
            self.log_files.append(log)
            self.launchers.append(
                subprocess.Popen(
                    launcher["argv"], env=env, cwd=launcher["cwd"], stdin=subprocess.DEVNULL,
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent,
                )
            )

    # -- observing --------------------------------------------------------------------------------
    def _ingest(self) -> None:
        now = time.time()
        for rank, tail in self.tails.items():
            for line in tail.read_lines():
                event = parse_line(line)
                if event is None:
                    continue
                if event.kind is EventKind.RANK_START:
                    self.pids[rank] = int(event.data.get("pid", 0))
                    self.rank_started[rank] = event.time
                    self.listeners[rank] = stacks.listener(event.data)
                elif event.kind is EventKind.RANK_ERROR:
                    self.errors.setdefault(rank, event)
                elif event.kind is EventKind.RANK_DONE:
                    self.done.add(rank)
                    self.final[rank] = event
                elif event.kind is EventKind.HEARTBEAT and "idle_s" in event.data:
                    self.beats[rank] = (event.time, dict(event.data))
        for rank, pid in self.pids.items():
            if rank in self.done or rank in self.errors or rank in self.vanished or not pid:
                continue
            gone, code = _pid_gone(pid)
            if gone:
                # re-read its events once: it may have reported just before exiting
                for line in self.tails[rank].read_lines():
                    event = parse_line(line)
                    if event is not None and event.kind is EventKind.RANK_DONE:
                        self.done.add(rank)
                    elif event is not None and event.kind is EventKind.RANK_ERROR:
                        self.errors.setdefault(rank, event)
                if rank not in self.done and rank not in self.errors:
                    self.vanished[rank] = (now, code)
        if self.state is RunState.STARTING and self.pids:
            self._set_state(RunState.RUNNING)

    def _failure(self) -> Failure:
        from nbtrain.backends import triage  # verdict-time only: not on the way to starting the launchers
        from nbtrain.backends.storecursor import tail_lines

        elastic: dict[int, int] = {}
        for i, _ in enumerate(self.launchers):
            text = "\n".join(tail_lines(self.logs_dir / f"node-{i}.log", 400))
            elastic.update(triage.parse_elastic_failures(text))
        candidates = [
            triage.Candidate(
                rank=rank, time=e.time, exc_type=e.data.get("exc_type"), message=e.data.get("message"),
                traceback=e.data.get("traceback"), cell_line=e.data.get("cell_line"), exit_code=1,
            )
            for rank, e in self.errors.items()
        ]
        candidates += [
            triage.Candidate(rank=rank, time=t, exit_code=code if code is not None else elastic.get(rank),
                             reason="" if (code or elastic.get(rank)) else "the process disappeared without reporting")
            for rank, (t, code) in self.vanished.items()
        ]
        last = {r: tail_lines(self.logs_dir / f"rank-{r}.log", LAST_LINES) for r in range(self.world)}
        chosen = triage.choose_first_failure(candidates, node_of=self.node_of, last_lines=last, exit_codes=elastic)
        if chosen is not None:
            return self._diagnosed(chosen)
        if elastic:
            rank = min(elastic)
            code = elastic[rank]
            return triage.choose_first_failure(
                [triage.Candidate(rank=rank, time=time.time(), exit_code=code)],
                node_of=self.node_of, last_lines=last, exit_codes=elastic,
            ) or Failure(reason="unknown")
        for i, proc in enumerate(self.launchers):
            exit_code = proc.poll()
            if exit_code is not None and exit_code != 0:
                code = exit_code
                lines = tail_lines(self.logs_dir / f"node-{i}.log", LAST_LINES)
                return Failure(
                    reason=f"the launcher of node {i} exited with code {code} before any rank reported",
                    node=i, exit_code=code, signal=triage.signal_name(-code if code < 0 else code),
                    last_lines=tuple(lines),
                )
        return Failure(reason="the gang ended without a verdict from any rank")

    # -- ending -----------------------------------------------------------------------------------
    def _end_gang(self) -> int:
        groups = tuple(p.pid for p in self.launchers if p.poll() is None)
        killed = procs.terminate_gang(self.run_id, grace_s=3.0, groups=groups)
        for proc in self.launchers:
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                proc.kill()
        return killed

    def _finish(self, state: RunState, reason: str = "", failure: Failure | None = None) -> None:
        self.state = state
        ended = time.time()
        if self.will_retry:
            reason = f"{reason}; restarting from the last checkpoint (attempt {int(self.plan['attempt']) + 1} of " \
                     f"{int(self.plan['restart_budget'])})"
        try:
            if failure is not None:
                self.out.emit(EventKind.FAILURE, **failure.to_dict())
            self.out.emit(EventKind.STATE, state=state.value, reason=reason, retrying=self.will_retry)
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
            failure = self._disk_full_failure(error)  # the verdict file still fits: it is what readers trust
        self._write_status(failure=failure, ended=ended)

    # -- hangs -------------------------------------------------------------------------------------
    def _diagnosed(self, failure: Failure) -> Failure:
        """``failure`` with a desync diagnosis when its rank failed inside a collective the others never entered."""
        if failure.rank is None or failure.rank not in self.errors:
            return failure
        issued: dict[int, int] = {}
        for rank in range(self.world):
            final = self.errors.get(rank) or self.final.get(rank)
            data = final.data if final is not None else (self.beats.get(rank, (0.0, {}))[1])
            if "collectives" in data:
                issued[rank] = int(data["collectives"])
        diagnosis = desync_at_failure(failure.rank, self.errors[failure.rank].data.get("failed_in"), issued,
                                      set(self.done))
        return replace(failure, diagnosis=diagnosis) if diagnosis else failure

    def _assess(self) -> Assessment | None:
        """The hang assessment from the ranks' latest progress reports (None: making progress)."""
        if self.stall_after <= 0:
            return None
        now = time.time()
        reports = {
            rank: RankProgress(rank=rank, idle_s=float(data.get("idle_s") or 0) + max(0.0, now - at),
                               collectives=int(data.get("collectives") or 0), in_collective=data.get("in_collective"),
                               step=data.get("step"), done=rank in self.done,
                               progressed=bool(data.get("progressed", True)))
            for rank, (at, data) in self.beats.items()
        }
        for rank in self.done:
            reports.setdefault(rank, RankProgress(rank=rank, idle_s=0.0, done=True))
        for rank, at in self.rank_started.items():  # started, no heartbeat yet: idle since its start
            reports.setdefault(rank, RankProgress(rank=rank, idle_s=max(0.0, now - at), progressed=False))
        return assess(reports, world=self.world, stall_after=self.stall_after)

    def _watch_progress(self) -> bool:
        """Report a stall (or its end) once; True when it has lasted ``--hang-timeout``."""
        assessment = self._assess()
        if _gist(assessment) != _gist(self.stall):  # a new stall, or new culprits (a late rank's first report)
            self.stall_stacks, self.stacks_due = "", {}
            if assessment is not None:
                self._ask_stacks(assessment)
            self.stall = assessment
            self.out.emit(EventKind.NOTICE, message=f"stalled: {assessment.message}" if assessment else
                          "progress resumed: every rank is making progress again",
                          stalled=list(assessment.stalled) if assessment else [])  # the monitor's grid marks them
            self._write_status()
        if self.stacks_due:
            self._show_stacks()
        if assessment is None or self.hang_timeout is None:
            return False
        self.stall = assessment
        now = time.time()
        idle = min(float(self.beats[r][1].get("idle_s") or 0) + now - self.beats[r][0] if r in self.beats
                   else now - self.rank_started.get(r, now) for r in assessment.stalled)
        return idle >= self.hang_timeout

    def _ask_stacks(self, assessment: Assessment) -> None:
        """Signal the stalled ranks on this machine to dump every thread's stack into their logs (see ``stacks``)."""
        for rank in assessment.stalled:
            who = self.listeners.get(rank)
            if who is not None and rank not in self.done:
                inside = self.beats.get(rank, (0.0, {}))[1].get("in_collective")
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
        self._write_status()

    def _hang_failure(self) -> Failure:
        from nbtrain.backends.storecursor import tail_lines

        assert self.stall is not None
        culprit = self.stall.culprits[0] if self.stall.culprits else None
        return Failure(
            reason=f"hung: {self.stall.message} (--hang-timeout {self.hang_timeout:g} s)",
            rank=culprit, node=self.node_of.get(culprit) if culprit is not None else None,
            traceback=stacks.render(stacks.collect(self.logs_dir, self.stall.stalled)) or None,
            last_lines=tuple(tail_lines(self.logs_dir / f"rank-{culprit}.log", LAST_LINES)) if culprit is not None else (),
        )

    def _observe(self, now: float) -> Observation:
        codes = [p.poll() for p in self.launchers]
        timeout = self.plan.get("timeout_s")
        return Observation(
            now=now, world=self.world, ranks_done=len(self.done),
            rank_failed=bool(self.errors or self.vanished or self._launcher_failed(codes)),
            gang_ended=all(c is not None for c in codes), gang_clean=all(c == 0 for c in codes),
            cancel_requested=self.cancel_requested or (self.dir / "cancel.request").exists(),
            timed_out=timeout is not None and time.time() - self.started > float(timeout),
            hung=self._watch_progress(),
            store_full=self._disk_full(),
        )

    def run(self) -> RunState:
        """Supervise until a verdict (:func:`nbtrain.backends.verdict.decide`); returns the final state."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        clock = Clock()
        try:
            # The launchers first: everything before them is on the path from the user's submit to the first step
            # (the launchers then spend seconds importing Accelerate). The reserve and the first status follow at
            # once; until status.json exists readers see the attempt as starting, and a supervisor dying in between
            # is still found (LocalBackend.status: no status, supervisor gone) and its gang ended (PDEATHSIG, marker).
            self._start()
            self._reserve()
            self._write_status()
            self.out.emit(EventKind.STATE, state=RunState.STARTING.value, reason="")
            while True:
                time.sleep(POLL_S)
                self._ingest()
                decision = decide(self._observe(time.monotonic()), clock, self.rules)
                clock = decision.clock
                if decision.end_gang:
                    self._end_gang()
                if decision.verdict is None:
                    continue
                if decision.cause is Cause.RANK_FAILED and len(self.done) >= self.world:
                    continue  # the settle window showed every rank done after all
                self._conclude(decision)
                return self.state
        except BaseException as error:
            self._end_gang()
            if isinstance(error, OSError) and error.errno == errno.ENOSPC:
                failure = self._disk_full_failure(error)
            else:
                failure = Failure(reason=f"the nbtrain supervisor crashed: {type(error).__name__}: {error}")
            self._finish(RunState.FAILED, failure.reason, failure)
            if failure.reason.startswith("no space left"):
                return self.state
            raise
        finally:
            for handle in self.log_files:
                handle.close()
            shutil.rmtree(self.plan["tmp_dir"], ignore_errors=True)
            self._release_reserve()

    def _conclude(self, decision: Decision) -> None:
        state = decision.verdict
        assert state is not None
        if state is RunState.CANCELLED:
            self._finish(state, "cancelled by the user")
        elif decision.cause is Cause.STORE_FULL:
            failure = self._disk_full_failure(None)
            self._finish(state, failure.summary(), failure)
        elif decision.cause is Cause.HANG:
            failure = self._hang_failure()
            self._finish(state, failure.summary(), failure)
        elif decision.cause is Cause.TIMEOUT:
            failure = Failure(reason=f"the run exceeded its timeout of {self.plan.get('timeout_s')} s (--timeout)")
            self._finish(state, failure.reason, failure)
        elif state is RunState.SUCCEEDED:
            self._finish(state, "every rank finished; lingering launchers ended" if decision.end_gang else "")
        else:
            failure = self._disk_full_failure(None) if self._disk_full() else self._failure()
            self._finish(state, failure.summary(), failure)

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

    def _launcher_failed(self, codes: list[int | None]) -> bool:
        """A launcher exited non-zero while some of its ranks had not reported RANK_DONE."""
        for launcher, code in zip(self.plan["launchers"], codes, strict=True):
            if code not in (None, 0) and not all(int(r) in self.done for r in launcher["ranks"]):
                return True
        return False

    def _on_signal(self, signum: int, frame: object) -> None:
        self.cancel_requested = True


RESTART_DELAY_S = 1.0


def next_attempt(plan: dict[str, Any]) -> Path:
    """Plan and write the next attempt of the same run (same spec, bundle and checkpoint root)."""
    from nbtrain.backends.local.backend import LocalBackend, write_attempt_files
    from nbtrain.store import Store

    store = Store(plan["store_root"])
    record = store.load(plan["run_id"])
    attempt = int(plan["attempt"]) + 1
    new = LocalBackend(store).plan_restart(record.spec, plan["bundle_dir"], plan["bundle_digest"], plan["run_id"],
                                           attempt=attempt, restart_budget=int(plan["restart_budget"]))
    return write_attempt_files(new.request)


def supervise(attempt_dir: Path, *, make: Callable[[Path], Supervisor] = Supervisor,
              advance: Callable[[dict[str, Any]], Path] = next_attempt) -> NoReturn:
    """Supervise attempts from ``attempt_dir`` until a verdict that is not followed by a restart; exit with it.

    ``make`` builds the supervisor of an attempt and ``advance`` plans and writes the next one (a backend that
    runs this loop elsewhere, e.g. inside a Slurm allocation, passes its own).
    """
    # The store is private (nbtrain.store): what this process, its launchers and their ranks write (status, logs,
    # events, result.pkl, checkpoints in the run directory) is this user's only, whatever the kernel's umask.
    os.umask(PRIVATE_UMASK)
    while True:
        supervisor = make(attempt_dir)
        state = supervisor.run()
        if not supervisor.restarts_here():
            break
        time.sleep(RESTART_DELAY_S)
        if not supervisor.may_still_restart():
            break
        if supervisor.cancel_requested or (attempt_dir / "cancel.request").exists():
            supervisor.cancel_requested = True  # a cancel during the pause: no restart
            supervisor._finish(RunState.CANCELLED, "cancelled by the user while restarting")
            state = RunState.CANCELLED
            break
        attempt_dir = advance(supervisor.plan)
    sys.exit(0 if state is RunState.SUCCEEDED else 1)


def main() -> None:
    """Process entry point: ``python -m nbtrain.backends.local.supervisor ATTEMPT_DIR``."""
    if len(sys.argv) != 2:
        sys.stderr.write("usage: python -m nbtrain.backends.local.supervisor ATTEMPT_DIR\n")
        sys.exit(2)
    supervise(Path(sys.argv[1]))


if __name__ == "__main__":
    main()
