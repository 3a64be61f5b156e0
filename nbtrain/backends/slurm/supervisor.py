"""The nbtrain supervisor of one Slurm attempt: the batch script's program, on the allocation's first node.

``python -m nbtrain.backends.slurm.supervisor ATTEMPT_DIR``: the local supervisor's rules and verdicts
(:class:`nbtrain.backends.local.supervisor.Supervisor`, the shared :func:`nbtrain.backends.verdict.decide`), with
the gang started as one ``srun`` step (one ``accelerate launch`` per node) instead of local launchers:

- the main address is the first node's ``NodeAddr`` as Slurm knows it (node names need not resolve), the port a
  free one of this node (the batch host is the allocation's first node);
- ranks write events and logs into the shared store; a rank's PID is watched only on this node;
- a SIGTERM with ``cancel.request`` present is the user's cancel (CANCELLED); without it Slurm is ending the job
  (time limit, preemption, a cancel outside nbtrain): the verdict then names Slurm's own job state;
- ``--max-restarts``: a failed attempt is restarted as a new step in the same allocation.
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
from nbtrain.backends.local.supervisor import LAST_LINES, Supervisor, supervise
from nbtrain.backends.slurm import cli
from nbtrain.backends.slurm.jobstate import slurm_verdict
from nbtrain.backends.slurm.script import srun_argv
from nbtrain.backends.slurm.steplog import blame_node
from nbtrain.backends.storecursor import tail_lines
from nbtrain.backends.verdict import Decision
from nbtrain.events import EventKind, FileTail, parse_line
from nbtrain.model import Failure, RunState
from nbtrain.store import write_json_atomic


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

    def _write_status(self, failure: Any = None, ended: float | None = None) -> None:
        super()._write_status(failure, ended)
        # record which job runs this attempt (status() of a restarted attempt follows the same job)
        path = self.dir / "status.json"
        from nbtrain.store import read_json

        data = read_json(path)
        data["slurm_job_id"] = self.job_id
        write_json_atomic(path, data)

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
            self.cancel_requested = False  # not the user's cancel: no CANCELLED, no restart either
            self.plan["restart_budget"] = self.plan["attempt"]
            if job is None or not job.ended:
                # Slurm has not published its final state yet (a time limit shows RUNNING until the job is gone):
                # leave the verdict to the kernel's side, which maps the state Slurm ends the job with
                self.out.emit(EventKind.NOTICE, message=f"Slurm is ending job {self.job_id}; the gang was ended")
                return
            state, failure = slurm_verdict(job, self.job_id, cancel_requested=False,
                                           supervisor_log=str(self.dir / "supervisor.log"))
            self.state = state
            self._finish(state, failure.reason if failure else "", failure)
            return
        super()._conclude(decision)


def next_attempt(plan: dict[str, Any]) -> Path:
    """Plan and write the next attempt of the same run in the same allocation (same spec, bundle, checkpoints)."""
    from nbtrain.backends.slurm.backend import SlurmBackend
    from nbtrain.store import Store

    store = Store(plan["store_root"])
    record = store.load(plan["run_id"])
    attempt = int(plan["attempt"]) + 1
    new = SlurmBackend(store).plan_restart(record.spec, plan["bundle_dir"], plan["bundle_digest"], plan["run_id"],
                                           attempt=attempt, restart_budget=int(plan["restart_budget"]),
                                           use_gpu=bool(plan["use_gpu"]))
    from nbtrain.backends.local.backend import write_attempt_files

    return write_attempt_files(new.request)


def main() -> None:
    """Process entry point (the batch script's): ``python -m nbtrain.backends.slurm.supervisor ATTEMPT_DIR``."""
    if len(sys.argv) != 2:
        sys.stderr.write("usage: python -m nbtrain.backends.slurm.supervisor ATTEMPT_DIR\n")
        sys.exit(2)
    supervise(Path(sys.argv[1]), make=SlurmSupervisor, advance=next_attempt)


__all__ = ["SlurmSupervisor", "main", "next_attempt"]

if __name__ == "__main__":
    main()
