"""The nbtrain supervisor of one Slurm attempt: the batch script's program, on the allocation's first node.

``python -m nbtrain.backends.slurm.supervisor ATTEMPT_DIR``: the local supervisor's rules and verdicts
(:class:`nbtrain.backends.local.supervisor.Supervisor`, the shared :func:`nbtrain.backends.verdict.decide`), with
the gang started as one ``srun`` step (one ``accelerate launch`` per node) instead of local launchers:

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
from typing import Any

from nbtrain.backends.local import procs
from nbtrain.backends.local.ports import free_port
from nbtrain.backends.local.supervisor import LAST_LINES, Supervisor
from nbtrain.backends.local.supervisor import supervise as local_supervise
from nbtrain.backends.slurm import cli
from nbtrain.backends.slurm.jobstate import slurm_verdict
from nbtrain.backends.slurm.restarts import Restart, RestartDecision, decide_restart, restart_note
from nbtrain.backends.slurm.script import probe_argv, srun_argv
from nbtrain.backends.slurm.steplog import blame_node, node_failure, unreachable_node
from nbtrain.backends.storecursor import tail_lines
from nbtrain.backends.verdict import Decision
from nbtrain.events import EventKind, FileTail, parse_line
from nbtrain.model import Failure, RunState
from nbtrain.store import private_dir, read_json, write_json_atomic

SLURM_FILE = "slurm.json"  # the attempt's Slurm job id, in every attempt directory
PROBE_TIMEOUT_S = 20.0  # a probe step that has not started a task on every node by then: a node is lost


class _Step:
    """The one srun step, seen as each node's launcher (the local rules read one launcher per node)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.pid = proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        self.proc.kill()


class _HostTail(FileTail):
    """A rank's event file; notes the rank as remote when its RANK_START comes from another host."""

    def __init__(self, path: Path, rank: int, host: str, remote: set[int]) -> None:
        super().__init__(path)
        self.rank, self.host, self.remote = rank, host, remote

    def read_lines(self, max_bytes: int = 4 * 1024 * 1024) -> list[str]:
        lines = super().read_lines(max_bytes)
        for line in lines:
            event = parse_line(line)
            if event is not None and event.kind is EventKind.RANK_START and event.data.get("host") != self.host:
                self.remote.add(self.rank)
        return lines


class _LocalPids(dict[int, int]):
    """Rank -> PID, with 0 (not watched by PID) for ranks on other nodes: their PIDs mean nothing in this /proc."""

    def __init__(self, remote: set[int]) -> None:
        super().__init__()
        self.remote = remote

    def __setitem__(self, rank: int, pid: int) -> None:
        super().__setitem__(rank, 0 if rank in self.remote else pid)


class SlurmSupervisor(Supervisor):
    """See the module docstring."""

    def __init__(self, attempt_dir: Path) -> None:
        super().__init__(attempt_dir)
        self.host = socket.gethostname()
        self.remote: set[int] = set()  # ranks on other nodes: their PIDs mean nothing here
        self.pids = _LocalPids(self.remote)
        self.tails = {r: _HostTail(self.events_dir / f"rank-{r}.jsonl", r, self.host, self.remote)
                      for r in range(self.world)}
        self.slurm_ending = False
        self.job_id = os.environ.get("SLURM_JOB_ID", "")
        self.restart = RestartDecision(Restart.NONE)  # decided once, when the attempt FAILED (see _finish)
        self.lost_node: str | None = None  # the node the allocation lost: the new one is asked without it

    @property
    def will_retry(self) -> bool:
        """A FAILED verdict is followed by a restart: here (a new step) or in a new allocation (from outside)."""
        return super().will_retry and self.restart.restart is not Restart.NONE

    def restarts_here(self) -> bool:
        """Only a restart in place is this process's: a new allocation is submitted from outside (see module)."""
        return self.will_retry and self.restart.restart is Restart.IN_PLACE

    def may_still_restart(self) -> bool:
        """The job ends under us (the attempt stays "retrying"; SlurmBackend.status restarts it elsewhere)."""
        return not self.slurm_ending

    def _write_status(self, failure: Any = None, ended: float | None = None) -> None:
        super()._write_status(failure, ended)
        # which job runs this attempt, and where its restart (if any) runs: read by SlurmBackend.status()
        path = self.dir / "status.json"
        data = read_json(path)
        data["slurm_job_id"] = self.job_id
        data["restart"] = self.restart.restart.value if self.will_retry else Restart.NONE.value
        if self.lost_node:
            data["lost_node"] = self.lost_node
        write_json_atomic(path, data)

    def _decide_restart(self) -> RestartDecision:
        """Where a FAILED attempt restarts (:func:`decide_restart`), from Slurm's view of the job and srun's output."""
        attempt, budget = int(self.plan["attempt"]), int(self.plan.get("restart_budget", 0))
        if self.cancel_requested or attempt >= budget:
            return RestartDecision(Restart.NONE)
        try:
            lost = node_failure((self.dir / "srun.log").read_text(errors="replace"))
        except OSError:
            lost = None
        state: str | None = "RUNNING"
        try:
            job = cli.jobs(fresh=True).get(self.job_id)
            state = job.state if job is not None else None
        except Exception:  # noqa: BLE001 - Slurm unreachable from here: the allocation is taken as lost
            state = "FAILED"
        checkpointed = attempt_checkpointed(self.events_dir)
        decision = decide_restart(job_state=state, node_failed=lost, cancelled=False, attempt=attempt,
                                  restart_budget=budget, checkpointed=checkpointed)
        nodes = int(self.plan["nodes"])
        if decision.restart is Restart.IN_PLACE and nodes > 1:
            # a task "Killed" on another node may be that node gone: slurmctld says so only after SlurmdTimeout,
            # and a step started there meanwhile would fail again. Ask every node to start a task first.
            said = cli.probe(probe_argv(nodes), timeout=PROBE_TIMEOUT_S)
            if said is not None:
                lost = unreachable_node(said) or "?"
                self.out.emit(EventKind.NOTICE, message=f"a node of Slurm job {self.job_id} cannot start a task "
                                                        f"({said}): the next attempt gets a new allocation")
                decision = decide_restart(job_state=state, node_failed=lost, cancelled=False, attempt=attempt,
                                          restart_budget=budget, checkpointed=checkpointed)
        self.lost_node = lost if lost and lost != "?" else None
        return decision

    def _finish(self, state: RunState, reason: str = "", failure: Failure | None = None) -> None:
        if state is RunState.FAILED and not self.slurm_ending:
            self.restart = self._decide_restart()
            if self.restart.restart is Restart.NEW_ALLOCATION and failure is not None:
                # the base's words say "restarting from the last checkpoint (attempt N of B)": say where
                lost = f"node {self.lost_node} is lost, " if self.lost_node else ""
                failure = Failure.from_dict({**failure.to_dict(), "reason": f"{failure.reason}; {lost}the allocation "
                                             f"of Slurm job {self.job_id} cannot be reused"})
                reason = failure.summary()
            elif self.restart.restart is Restart.NONE and self.restart.why_not and failure is not None:
                failure = Failure.from_dict({**failure.to_dict(),
                                             "reason": f"{failure.reason}; {self.restart.why_not}"})
                reason = failure.summary()
        super()._finish(state, reason, failure)

    def _start(self) -> None:
        self._prepare()
        write_json_atomic(self.dir / "supervisor.json", {"host": self.host, "identity": self.identity,
                                                        "job_id": self.job_id})
        nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
        address = cli.node_address(cli.first_node(nodelist)) if nodelist else "127.0.0.1"
        port = free_port()
        self.out.emit(EventKind.NOTICE, message=f"Slurm job {self.job_id} on {nodelist or 'this node'}: rendezvous "
                                                f"{address}:{port}")
        env = dict(os.environ)
        env.pop("NBTRAIN_SUPERVISOR_OF", None)
        env[procs.MARKER] = self.run_id
        log = open(self.dir / "srun.log", "ab")
        self.log_files.append(log)
        step = subprocess.Popen(srun_argv(self.plan, address=address, port=port), env=env, cwd=self.plan["cwd"],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.launchers.extend(_Step(step) for _ in self.plan["launchers"])  # type: ignore[misc]

    def _failure(self) -> Failure:
        """The ranks' evidence, unless srun saw another node's task fail first (a dead node: see steplog)."""
        chosen = super()._failure()
        try:
            said = (self.dir / "srun.log").read_text(errors="replace")
        except OSError:
            return chosen
        last = {r: tail_lines(self.logs_dir / f"rank-{r}.log", LAST_LINES) for r in range(self.world)}
        return blame_node(chosen, said, node_of=self.node_of, last_lines=last) or chosen

    def _end_gang(self) -> int:
        step = self.launchers[0].proc if self.launchers else None  # type: ignore[attr-defined]
        if step is not None and step.poll() is None:
            try:
                os.killpg(step.pid, signal.SIGTERM)  # srun forwards it to every task of the step, on every node
            except (ProcessLookupError, PermissionError):
                pass
            try:
                step.wait(timeout=5)
            except subprocess.TimeoutExpired:
                step.kill()
        killed = procs.terminate_gang(self.run_id, grace_s=3.0)
        if step is not None:
            try:
                step.wait(timeout=2)
            except subprocess.TimeoutExpired:
                step.kill()
        return killed

    def _on_signal(self, signum: int, frame: object) -> None:
        if (self.dir / "cancel.request").exists():
            self.cancel_requested = True
        else:
            self.slurm_ending = True
            self.cancel_requested = True  # end the gang now; _conclude names Slurm's reason

    def _conclude(self, decision: Decision) -> None:
        if decision.verdict is RunState.CANCELLED and self.slurm_ending and not (self.dir / "cancel.request").exists():
            job = None
            try:
                job = cli.jobs(fresh=True).get(self.job_id)
            except Exception:  # noqa: BLE001 - the verdict below still says Slurm ended the job
                pass
            self.cancel_requested = False  # not the user's cancel: no CANCELLED
            if job is None or not job.ended:
                # Slurm has not published its final state yet (a time limit shows RUNNING until the job is gone):
                # leave the verdict, and the restart, to the kernel's side, which maps the state Slurm ends the
                # job with (SlurmBackend.status)
                self.out.emit(EventKind.NOTICE, message=f"Slurm is ending job {self.job_id}; the gang was ended")
                return
            state, failure = slurm_verdict(job, self.job_id, cancel_requested=False,
                                           supervisor_log=str(self.dir / "supervisor.log"))
            attempt, budget = int(self.plan["attempt"]), int(self.plan.get("restart_budget", 0))
            self.restart = decide_restart(job_state=job.state, node_failed=None, cancelled=False, attempt=attempt,
                                          restart_budget=budget, checkpointed=attempt_checkpointed(self.events_dir),
                                          job_ended=True)
            note = restart_note(self.restart, attempt=attempt, restart_budget=budget, job_id=self.job_id)
            if failure is not None and self.restart.restart is Restart.NONE and note:
                failure = Failure.from_dict({**failure.to_dict(), "reason": f"{failure.reason}; {note}"})
            self.state = state
            self._finish(state, failure.reason if failure else "", failure)
            return
        super()._conclude(decision)


def attempt_checkpointed(events_dir: Path) -> bool:
    """Whether a rank of the attempt reported a complete checkpoint (a CHECKPOINT event in its event file)."""
    for path in events_dir.glob("rank-*.jsonl"):
        try:
            with open(path, "rb") as handle:
                if any(b'"checkpoint"' in line and (event := parse_line(line.decode(errors="replace"))) is not None
                       and event.kind is EventKind.CHECKPOINT for line in handle):
                    return True
        except OSError:
            continue
    return False


def next_attempt(plan: dict[str, Any]) -> Path:
    """Plan and write the next attempt of the same run in the same allocation (same spec, bundle, checkpoints)."""
    from nbtrain.backends.local.backend import write_attempt_files
    from nbtrain.backends.slurm.backend import SlurmBackend
    from nbtrain.spec import JobSpec
    from nbtrain.store import Store

    store = Store(plan["store_root"])
    attempt = int(plan["attempt"]) + 1
    new = SlurmBackend(store).plan_restart(JobSpec.from_dict(plan["spec"]), plan["bundle_dir"], plan["bundle_digest"],
                                           plan["run_id"], attempt=attempt, restart_budget=int(plan["restart_budget"]),
                                           previous=plan)
    # the job id first: a reader that finds the new attempt's directory knows at once which job runs it
    root = private_dir(Path(new.request["attempt_dir"]))
    write_json_atomic(root / SLURM_FILE, {"job_id": os.environ.get("SLURM_JOB_ID", "")})  # the same job runs it
    return write_attempt_files(new.request)


def supervise(attempt_dir: Path) -> None:
    """Supervise attempts from ``attempt_dir`` while each FAILED one restarts here (a new step); exit with the last.

    The local loop (:func:`nbtrain.backends.local.supervisor.supervise`); :meth:`SlurmSupervisor.restarts_here`
    leaves a restart in a new allocation to the kernel's side, and no restart starts once Slurm is ending the job.
    """
    local_supervise(attempt_dir, make=SlurmSupervisor, advance=next_attempt)


def main() -> None:
    """Process entry point (the batch script's): ``python -m nbtrain.backends.slurm.supervisor ATTEMPT_DIR``."""
    if len(sys.argv) != 2:
        sys.stderr.write("usage: python -m nbtrain.backends.slurm.supervisor ATTEMPT_DIR\n")
        sys.exit(2)
    supervise(Path(sys.argv[1]))


__all__ = ["SLURM_FILE", "SlurmSupervisor", "attempt_checkpointed", "main", "next_attempt", "supervise"]

if __name__ == "__main__":
    main()
