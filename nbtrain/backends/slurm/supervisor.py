"""The nbtrain supervisor of one Slurm attempt: the batch script's program, on the allocation's first node.

``python -m nbtrain.backends.slurm.supervisor ATTEMPT_DIR``: the gang engine (:mod:`nbtrain.gang.engine`: the
shared rules, verdicts and restarts) with :class:`SrunGang` as its driver: the gang is one ``srun`` step (one
``accelerate launch`` per node) instead of local launchers:

- the main address is the first node's ``NodeAddr`` as Slurm knows it (node names need not resolve), the port a
  free one of this node (the batch host is the allocation's first node);
- ranks write events and logs into the shared store; a rank's PID is watched only on this node;
- a SIGTERM with ``cancel.request`` present is the user's cancel (CANCELLED); without it Slurm is ending the job
  (time limit, preemption, a cancel outside nbtrain): the verdict then names Slurm's own job state;
- ``--max-restarts`` (:func:`nbtrain.backends.slurm.restarts.decide_restart`): a rank failure in a live, whole
  allocation is restarted here as a new step; when the allocation is lost (srun saw a node fail, Slurm ends the
  job) the verdict says ``retrying`` with ``restart: new_allocation`` and this process exits: the next attempt is a
  new ``sbatch`` job, submitted from outside (:class:`nbtrain.backends.slurm.backend.SlurmBackend` follows the run).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

from nbtrain.backends.local.ports import free_port
from nbtrain.backends.slurm import cli
from nbtrain.backends.slurm.jobstate import slurm_verdict
from nbtrain.backends.slurm.request import SlurmRequest
from nbtrain.backends.slurm.restarts import Restart, RestartDecision, decide_restart, restart_note
from nbtrain.backends.slurm.script import probe_argv, srun_argv
from nbtrain.backends.slurm.steplog import blame_node, node_failure, unreachable_node
from nbtrain.backends.verdict import Decision
from nbtrain.events import Event
from nbtrain.gang import procs
from nbtrain.gang.driver import DriverDefaults
from nbtrain.gang.engine import Engine
from nbtrain.gang.engine import supervise as engine_supervise
from nbtrain.gang.facts import LAST_LINES, attempt_checkpointed
from nbtrain.gang.files import CANCEL_REQUEST, SUPERVISOR_LOG, write_attempt_files
from nbtrain.gang.request import GangRequest
from nbtrain.model import Failure, RunState
from nbtrain.store import private_dir, write_json_atomic

__all__ = ["SLURM_FILE", "SrunGang", "attempt_checkpointed", "main", "next_attempt", "supervise"]

SLURM_FILE = "slurm.json"  # the attempt's Slurm job id, in every attempt directory
PROBE_TIMEOUT_S = 20.0  # a probe step that has not started a task on every node by then: a node is lost


class SrunGang(DriverDefaults):
    """The gang as one ``srun`` step of the allocation this process runs in; see the module docstring."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.request = SlurmRequest.of(engine.plan)
        self.host = socket.gethostname()
        self.step: subprocess.Popen[bytes] | None = None
        self.log: IO[bytes] | None = None
        self.slurm_ending = False
        self.job_id = os.environ.get("SLURM_JOB_ID", "")
        self.restart = RestartDecision(Restart.NONE)  # decided once, when the attempt FAILED (see before_verdict)
        self.lost_node: str | None = None  # the node the allocation lost: the new one is asked without it

    # -- the step -----------------------------------------------------------------------------------
    def start(self, tmp: Path) -> None:
        """Start the one srun step: every node's launcher, with this node's address and a free port."""
        engine = self.engine
        write_json_atomic(engine.dir / "supervisor.json", {"host": self.host, "identity": engine.identity,
                                                          "job_id": self.job_id})
        nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
        address = cli.node_address(cli.first_node(nodelist)) if nodelist else "127.0.0.1"
        port = free_port()
        engine.notice(f"Slurm job {self.job_id} on {nodelist or 'this node'}: rendezvous {address}:{port}")
        env = dict(os.environ)
        env.pop("NBTRAIN_SUPERVISOR_OF", None)
        env[procs.MARKER] = engine.run_id
        self.log = open(engine.dir / "srun.log", "ab")
        self.step = subprocess.Popen(srun_argv(self.request, address=address, port=port), env=env,
                                     cwd=self.request.cwd, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def nodes(self) -> list[tuple[int, int | None]]:
        """The step stands for every node's launcher (the rules read one launcher per node)."""
        if self.step is None:
            return []
        code = self.step.poll()
        return [(self.step.pid, code) for _ in self.request.launchers]

    def watched_pid(self, rank: int, pid: int, event: Event) -> int:
        """A rank on another node is not watched by PID: its PID means nothing in this /proc."""
        return pid if event.data.get("host") == self.host else 0

    def end(self) -> int:
        """SIGTERM the step (srun forwards it to every task, on every node), then whatever is left here."""
        step = self.step
        if step is not None and step.poll() is None:
            try:
                os.killpg(step.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                step.wait(timeout=5)
            except subprocess.TimeoutExpired:
                step.kill()
        killed = procs.terminate_gang(self.engine.run_id, grace_s=3.0)
        if step is not None:
            try:
                step.wait(timeout=2)
            except subprocess.TimeoutExpired:
                step.kill()
        return killed

    def close(self) -> None:
        """Close srun's log."""
        if self.log is not None:
            self.log.close()

    def evidence(self, chosen: Failure) -> Failure:
        """The ranks' evidence, unless srun saw another node's task fail first (a dead node: see steplog)."""
        from nbtrain.backends.storecursor import tail_lines

        engine = self.engine
        try:
            said = (engine.dir / "srun.log").read_text(errors="replace")
        except OSError:
            return chosen
        last = {r: tail_lines(engine.logs_dir / f"rank-{r}.log", LAST_LINES) for r in range(engine.world)}
        return blame_node(chosen, said, node_of=engine.node_of, last_lines=last) or chosen

    # -- signals and Slurm's own ending --------------------------------------------------------------
    def on_signal(self, signum: int) -> None:
        """With ``cancel.request``: the user's cancel. Without: Slurm is ending the job (named in the verdict)."""
        if not (self.engine.dir / CANCEL_REQUEST).exists():
            self.slurm_ending = True
        self.engine.cancel_requested = True  # end the gang now; conclude names Slurm's reason

    def conclude(self, decision: Decision) -> bool:
        """Slurm ended the job (not the user): the verdict names Slurm's job state, or is left to the kernel's side."""
        engine = self.engine
        if not (decision.verdict is RunState.CANCELLED and self.slurm_ending
                and not (engine.dir / CANCEL_REQUEST).exists()):
            return False
        job = None
        try:
            job = cli.jobs(fresh=True).get(self.job_id)
        except Exception:  # noqa: BLE001 - the verdict below still says Slurm ended the job
            pass
        engine.cancel_requested = False  # not the user's cancel: no CANCELLED
        if job is None or not job.ended:
            # Slurm has not published its final state yet (a time limit shows RUNNING until the job is gone):
            # leave the verdict, and the restart, to the kernel's side, which maps the state Slurm ends the
            # job with (SlurmBackend.status)
            engine.notice(f"Slurm is ending job {self.job_id}; the gang was ended")
            return True
        state, failure = slurm_verdict(job, self.job_id, cancel_requested=False,
                                       supervisor_log=str(engine.dir / SUPERVISOR_LOG))
        attempt, budget = engine.attempt, engine.restart_budget
        self.restart = decide_restart(job_state=job.state, node_failed=None, cancelled=False, attempt=attempt,
                                      restart_budget=budget, checkpointed=attempt_checkpointed(engine.events_dir),
                                      job_ended=True)
        note = restart_note(self.restart, attempt=attempt, restart_budget=budget, job_id=self.job_id)
        if failure is not None and self.restart.restart is Restart.NONE and note:
            failure = Failure.from_dict({**failure.to_dict(), "reason": f"{failure.reason}; {note}"})
        engine.finish(state, failure.reason if failure else "", failure)
        return True

    # -- restarts --------------------------------------------------------------------------------------
    def placement(self) -> Restart:
        """Where a FAILED attempt restarts: decided once, at its verdict (NONE until then)."""
        return self.restart.restart

    def may_still_restart(self) -> bool:
        """The job ends under us (the attempt stays "retrying"; SlurmBackend.status restarts it elsewhere)."""
        return not self.slurm_ending

    def status_fields(self) -> dict[str, Any]:
        """Which job runs this attempt, and where its restart (if any) runs: read by SlurmBackend.status()."""
        fields: dict[str, Any] = {"slurm_job_id": self.job_id,
                                  "restart": self.restart.restart.value if self.engine.will_retry
                                  else Restart.NONE.value}
        if self.lost_node:
            fields["lost_node"] = self.lost_node
        return fields

    def before_verdict(self, state: RunState, reason: str, failure: Failure | None) -> tuple[str, Failure | None]:
        """A FAILED attempt's restart is decided here, and the verdict says where it runs (or why not)."""
        if state is not RunState.FAILED or self.slurm_ending:
            return reason, failure
        self.restart = self._decide_restart()
        if self.restart.restart is Restart.NEW_ALLOCATION and failure is not None:
            # the engine's words say "restarting from the last checkpoint (attempt N of B)": say where
            lost = f"node {self.lost_node} is lost, " if self.lost_node else ""
            failure = Failure.from_dict({**failure.to_dict(), "reason": f"{failure.reason}; {lost}the allocation "
                                         f"of Slurm job {self.job_id} cannot be reused"})
            reason = failure.summary()
        elif self.restart.restart is Restart.NONE and self.restart.why_not and failure is not None:
            failure = Failure.from_dict({**failure.to_dict(), "reason": f"{failure.reason}; {self.restart.why_not}"})
            reason = failure.summary()
        return reason, failure

    def _decide_restart(self) -> RestartDecision:
        """Where a FAILED attempt restarts (:func:`decide_restart`), from Slurm's view of the job and srun's output."""
        engine = self.engine
        attempt, budget = engine.attempt, engine.restart_budget
        if engine.cancel_requested or attempt >= budget:
            return RestartDecision(Restart.NONE)
        try:
            lost = node_failure((engine.dir / "srun.log").read_text(errors="replace"))
        except OSError:
            lost = None
        state: str | None = "RUNNING"
        try:
            job = cli.jobs(fresh=True).get(self.job_id)
            state = job.state if job is not None else None
        except Exception:  # noqa: BLE001 - Slurm unreachable from here: the allocation is taken as lost
            state = "FAILED"
        checkpointed = attempt_checkpointed(engine.events_dir)
        decision = decide_restart(job_state=state, node_failed=lost, cancelled=False, attempt=attempt,
                                  restart_budget=budget, checkpointed=checkpointed)
        nodes = self.request.nodes
        if decision.restart is Restart.IN_PLACE and nodes > 1:
            # a task "Killed" on another node may be that node gone: slurmctld says so only after SlurmdTimeout,
            # and a step started there meanwhile would fail again. Ask every node to start a task first.
            said = cli.probe(probe_argv(nodes), timeout=PROBE_TIMEOUT_S)
            if said is not None:
                lost = unreachable_node(said) or "?"
                engine.notice(f"a node of Slurm job {self.job_id} cannot start a task ({said}): the next attempt "
                              "gets a new allocation")
                decision = decide_restart(job_state=state, node_failed=lost, cancelled=False, attempt=attempt,
                                          restart_budget=budget, checkpointed=checkpointed)
        self.lost_node = lost if lost and lost != "?" else None
        return decision


def next_attempt(previous: GangRequest) -> Path:
    """Plan and write the next attempt of the same run in the same allocation (same spec, bundle, checkpoints)."""
    from nbtrain.backends.slurm.backend import SlurmBackend
    from nbtrain.store import Store

    plan = SlurmRequest.of(previous)
    new = SlurmBackend(Store(plan.store_root)).plan_restart(plan.spec, plan.bundle_dir, plan.bundle_digest,
                                                            plan.run_id, attempt=plan.attempt + 1,
                                                            restart_budget=plan.restart_budget, previous=plan)
    # the job id first: a reader that finds the new attempt's directory knows at once which job runs it
    root = private_dir(Path(new.request.attempt_dir))
    write_json_atomic(root / SLURM_FILE, {"job_id": os.environ.get("SLURM_JOB_ID", "")})  # the same job runs it
    return write_attempt_files(new.request)


def supervise(attempt_dir: Path) -> None:
    """Supervise attempts from ``attempt_dir`` while each FAILED one restarts here (a new step); exit with the last.

    The engine's loop (:func:`nbtrain.gang.engine.supervise`); :meth:`SrunGang.placement` leaves a restart in a new
    allocation to the kernel's side, and no restart starts once Slurm is ending the job.
    """
    engine_supervise(attempt_dir, SrunGang, next_attempt, SlurmRequest)


def main() -> None:
    """Process entry point (the batch script's): ``python -m nbtrain.backends.slurm.supervisor ATTEMPT_DIR``."""
    if len(sys.argv) != 2:
        sys.stderr.write("usage: python -m nbtrain.backends.slurm.supervisor ATTEMPT_DIR\n")
        sys.exit(2)
    supervise(Path(sys.argv[1]))


if __name__ == "__main__":
    main()
