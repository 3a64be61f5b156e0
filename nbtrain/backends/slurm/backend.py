"""``--backend slurm``: one ``sbatch`` job per attempt, the nbtrain supervisor inside it, the store shared.

The kernel's side is thin: :meth:`SlurmBackend.plan` builds the batch script (pure, printable) and asks Slurm
with ``sbatch --test-only`` whether the request can ever run (refused before submission with Slurm's reason);
:meth:`SlurmBackend.submit` writes the attempt's files into the store and runs ``sbatch``. The supervisor
(:mod:`.supervisor`) decides the verdict inside the allocation with the shared rules; :meth:`SlurmBackend.status`
reads it from the store and, while there is none, asks Slurm (one batched ``scontrol show job -o`` per second
per process): the queue reason and position while pending, and a clear verdict when Slurm ended the job itself
(time limit, node failure, preemption, memory) or the supervisor died.

The store (``NBTRAIN_HOME``) must be on a filesystem every node mounts at the same path, like the Python
environment (``NBTRAIN_PYTHON``, default: this interpreter).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from nbtrain.backends.accelerate_config import (
    CONFIG_NAME,
    accelerate_config,
    read_team_config,
    render,
    strategy_refusal,
    team_notice,
)
from nbtrain.backends.base import Capabilities, Plan, RunHandle, StoreBackedBackend
from nbtrain.backends.hang import effective_stall_after
from nbtrain.backends.launch import LaunchTarget, accelerate_argv
from nbtrain.backends.local.backend import write_attempt_files
from nbtrain.backends.slurm import cli
from nbtrain.backends.slurm.jobstate import queued_detail, slurm_verdict
from nbtrain.backends.slurm.script import batch_script, sbatch_options
from nbtrain.backends.storecursor import attempt_numbers
from nbtrain.errors import EnvironmentProblem, SpecError
from nbtrain.events import EventKind, EventWriter
from nbtrain.model import Failure, RunState, RunStatus
from nbtrain.runtime import context as rt
from nbtrain.runtime.progress import ENV_STALL_S
from nbtrain.spec import Device, JobSpec
from nbtrain.storage.checkpoints import run_checkpoint_root
from nbtrain.store import Store, read_json, write_json_atomic

__all__ = ["SlurmBackend", "job_leftovers"]

SCRIPT_NAME = "job.sbatch"


def job_leftovers(job_id: str, run_id: str) -> list[int]:
    """Live processes of this machine that belong to Slurm job ``job_id`` of run ``run_id`` (by their environment).

    With ``proctrack/linuxproc`` Slurm loses a task's child that daemonised; it still carries ``SLURM_JOB_ID`` and
    the run marker in its environment.
    """
    needles = (f"SLURM_JOB_ID={job_id}".encode(), f"{rt.ENV_RUN_ID}={run_id}".encode())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except (OSError, IndexError):
            continue
        if all(n in environ for n in needles) and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def _kill_leftovers(job_id: str, run_id: str) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = job_leftovers(job_id, run_id)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + 2
        while pids and time.monotonic() < deadline and job_leftovers(job_id, run_id):
            time.sleep(0.05)


class SlurmBackend(StoreBackedBackend):
    """Runs gangs as Slurm batch jobs. See :class:`nbtrain.backends.base.Backend` and the module docstring."""

    name = "slurm"
    capabilities = Capabilities(restarts=True, checkpoints=True, gpus=True, multi_node=True, shared_store=True)

    def __init__(self, store: Store | None = None, *, python: str | None = None) -> None:
        super().__init__(store)
        self.python = python or os.environ.get("NBTRAIN_PYTHON") or sys.executable

    def checkpoint_root(self, spec: JobSpec, run_id: str) -> str:
        """``--checkpoint-dir``/<run id> (on a filesystem every node shares), else inside the run's directory.

        A URL (``s3://…``) stays a URL: see :func:`nbtrain.storage.checkpoints.run_checkpoint_root`."""
        return run_checkpoint_root(spec.checkpoint_dir, run_id, default=self.store.run_dir(run_id) / "checkpoints")

    # -- plan -------------------------------------------------------------------------------------
    def _plan(self, spec: JobSpec, bundle_dir: str, bundle_digest: str, run_id: str, *, attempt: int = 0,
              restart_budget: int | None = None, use_gpu: bool | None = None, check: bool = True) -> Plan:
        """The batch script of ``attempt``; with ``check``, Slurm is asked (``sbatch --test-only``) whether it can run.

        Raises EnvironmentProblem without a Slurm client, controller or accelerate; SpecError with Slurm's own
        reason for a partition, account or QOS it does not know or a request no node can satisfy.
        """
        if check:
            cli.require_client("sbatch")
            if importlib.util.find_spec("accelerate") is None and self.python == sys.executable:
                raise EnvironmentProblem(f"accelerate is not installed for {self.python}; install it with "
                                         f"`{self.python} -m pip install accelerate` (on the shared filesystem).")
        notices: list[str] = []
        if use_gpu is None:
            use_gpu = spec.device is Device.GPU or (spec.device is Device.AUTO and check
                                                   and cli.partition_has_gpus(spec.partition))
        refusal = strategy_refusal(spec, use_gpu)
        if refusal is not None:
            raise SpecError(refusal)
        if not use_gpu:
            notices.append(f"no GPU used: {spec.nodes} Slurm node(s) x {spec.procs} CPU process(es) over gloo"
                           + (" (--device cpu)" if spec.device is Device.CPU else " (the partition declares no GPUs)"))
        attempt_dir = self.store.attempt_dir(run_id, attempt)
        events_dir, logs_dir = attempt_dir / "events", attempt_dir / "logs"
        config_path = attempt_dir / CONFIG_NAME
        team = read_team_config(spec.accelerate_config) if spec.accelerate_config else None
        # the address and port are the launchers' flags (known once the job runs), which win over the config's
        config, source = accelerate_config(spec, use_gpu=use_gpu, main_address="127.0.0.1", main_port=29500, team=team)
        config_text = render(config)
        if team is not None:
            notices.append(team_notice(str(spec.accelerate_config), source))
        env = {
            **spec.env,
            rt.ENV_RUN_ID: run_id,
            rt.ENV_ATTEMPT: str(attempt),
            rt.ENV_EVENTS_DIR: str(events_dir),
            rt.ENV_LOGS_DIR: str(logs_dir),
            rt.ENV_RESULT_PATH: str(attempt_dir / "result.pkl"),
            rt.ENV_COLLECTIVE_TIMEOUT: str(spec.collective_timeout_s),
            ENV_STALL_S: str(effective_stall_after(spec.stall_after_s, spec.hang_timeout_s)),
            "NBTRAIN_CHECKPOINT_DIR": self.checkpoint_root(spec, run_id),
            "NBTRAIN_KEEP_CHECKPOINTS": str(spec.keep_checkpoints),
            "PYTHONUNBUFFERED": "1",
        }
        env.setdefault("OMP_NUM_THREADS", "1")
        options = sbatch_options(spec, use_gpu=use_gpu, job_name=f"nbtrain-{run_id}",
                                 output=str(attempt_dir / "supervisor.log"), chdir=os.getcwd())
        script = batch_script(options, python=self.python, attempt_dir=str(attempt_dir), run_id=run_id)
        if check:
            cli.test_only(options, script)
        template = accelerate_argv(spec, python=self.python, use_gpu=use_gpu, node_rank="$SLURM_NODEID",
                                   main_address="<NodeAddr of the first node>", main_port=0,
                                   target=LaunchTarget("nbtrain.runtime.worker", (bundle_dir,)),
                                   config_file=str(config_path))
        describe = "\n".join(
            [f"device:    {'GPU (--gres=gpu:' + str(spec.procs) + ' per node)' if use_gpu else 'CPU (gloo)'}",
             f"batch script ({attempt_dir / SCRIPT_NAME}):", *("  " + line for line in script.splitlines()),
             "each node: " + " ".join(template).replace("--main_process_port 0", "--main_process_port <free port>"),
             f"accelerate config ({config_path}):", *("  " + line for line in config_text.splitlines())])
        request: dict[str, Any] = {
            "run_id": run_id, "attempt": attempt, "world_size": spec.world_size, "nodes": spec.nodes,
            "use_gpu": use_gpu, "spec": spec.to_dict(), "python": self.python, "cwd": os.getcwd(), "env": env,
            "launchers": [{"node": n, "ranks": list(range(n * spec.procs, (n + 1) * spec.procs))}
                          for n in range(spec.nodes)],
            "events_dir": str(events_dir), "logs_dir": str(logs_dir), "tmp_dir": str(attempt_dir / "tmp"),
            "attempt_dir": str(attempt_dir), "timeout_s": spec.timeout_s, "stall_after_s": spec.stall_after_s,
            "hang_timeout_s": spec.hang_timeout_s,
            "restart_budget": attempt + spec.max_restarts if restart_budget is None else restart_budget,
            "store_root": str(self.store.root), "accelerate_config": {"path": str(config_path), "text": config_text},
            "bundle_dir": bundle_dir, "bundle_digest": bundle_digest, "notices": notices, "describe": describe,
            "sbatch_options": options, "script": script,
        }
        return Plan(self.name, run_id, spec, bundle_digest, bundle_dir, request, tuple(notices), attempt)

    def plan_restart(self, spec: JobSpec, bundle_dir: str, bundle_digest: str, run_id: str, *, attempt: int,
                     restart_budget: int, use_gpu: bool) -> Plan:
        """The plan of an automatic restart inside the same allocation (no Slurm query: the job already runs)."""
        return self._plan(spec, bundle_dir, bundle_digest, run_id, attempt=attempt, restart_budget=restart_budget,
                          use_gpu=use_gpu, check=False)

    # -- I/O --------------------------------------------------------------------------------------
    def submit(self, plan: Plan) -> RunHandle:
        """Write the attempt's files into the (shared) store and ``sbatch`` its script; returns at once."""
        attempt_dir = write_attempt_files(plan.request)
        script_path = attempt_dir / SCRIPT_NAME
        with open(os.open(script_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o700), "w", encoding="utf-8") as out:
            out.write(plan.request["script"])
        job_id = cli.sbatch(str(script_path))
        write_json_atomic(attempt_dir / "slurm.json", {"job_id": job_id})
        return RunHandle(self.name, plan.run_id, {"attempt": plan.request["attempt"], "job_id": job_id})

    def _job_id(self, handle: RunHandle, attempt: int) -> str:
        try:
            return str(read_json(self.store.attempt_dir(handle.run_id, attempt) / "slurm.json")["job_id"])
        except (OSError, ValueError, KeyError):
            pass
        try:
            return str(read_json(self.store.attempt_dir(handle.run_id, attempt) / "status.json")["slurm_job_id"])
        except (OSError, ValueError, KeyError):
            return str(handle.data.get("job_id", ""))

    def status(self, handle: RunHandle) -> RunStatus:
        """The supervisor's verdict from the store; while there is none, what Slurm says of the job (see module)."""
        attempts = [a for a in attempt_numbers(self.store, handle.run_id) if a >= handle.attempt]
        if not attempts:
            return RunStatus(RunState.PENDING, attempt=handle.attempt)
        attempt = attempts[-1]
        attempt_dir = self.store.attempt_dir(handle.run_id, attempt)
        data = _read_status(attempt_dir / "status.json")
        found = _stored(data, attempt)
        if found is not None and (found.state.terminal or (data and data.get("retrying"))):
            return found
        job_id = self._job_id(handle, attempt)
        jobs = cli.jobs()
        job = jobs.get(job_id)
        if job is not None and job.pending:
            return RunStatus(RunState.QUEUED, attempt, detail=queued_detail(job, jobs))
        if job is not None and not job.ended:
            return found or RunStatus(RunState.STARTING, attempt, detail=f"Slurm job {job_id} {job.state.lower()}")
        # the job is over (or gone): the supervisor's verdict, or Slurm's
        data = _read_status(attempt_dir / "status.json")
        found = _stored(data, attempt)
        if found is not None and found.state.terminal:
            return found
        if job is None:
            jobs = cli.jobs(fresh=True)
            job = jobs.get(job_id)
            if job is not None and not job.ended:
                return self.status(handle)
        return self._conclude(handle.run_id, attempt_dir, attempt, job_id, job, data)

    def _conclude(self, run_id: str, attempt_dir: Path, attempt: int, job_id: str, job: Any,
                  data: dict[str, Any] | None) -> RunStatus:
        """Write the verdict of an attempt whose job ended without the supervisor's (once, by one reader)."""
        _kill_leftovers(job_id, run_id)
        state, failure = slurm_verdict(job, job_id, cancel_requested=(attempt_dir / "cancel.request").exists(),
                                       supervisor_log=str(attempt_dir / "supervisor.log"))
        ended = time.time()
        started = (data or {}).get("started")
        verdict = {**(data or {}), "state": state.value, "attempt": attempt, "failure": failure.to_dict() if failure
                   else None, "ended": ended, "retrying": False, "updated": ended, "concluded_by": "observer",
                   "slurm_job_id": job_id}
        try:
            fd = os.open(attempt_dir / "verdict.claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            for _ in range(50):  # another reader is writing the same verdict
                written = _stored(_read_status(attempt_dir / "status.json"), attempt)
                if written is not None and written.state.terminal:
                    return written
                time.sleep(0.02)
        except OSError:
            pass
        else:
            os.close(fd)
            try:
                writer = EventWriter(attempt_dir / "events" / "observer.jsonl", "observer", attempt=attempt)
                if failure is not None:
                    writer.emit(EventKind.FAILURE, **failure.to_dict())
                writer.emit(EventKind.STATE, state=state.value,
                            reason=failure.summary() if failure else "cancelled by the user")
                write_json_atomic(attempt_dir / "status.json", verdict)
            except OSError:
                pass
        return RunStatus(state, attempt, started, ended, failure)

    def _after_terminal(self, handle: RunHandle) -> None:
        """Leftovers on this machine of the handle's job, if any (daemonised tasks)."""
        for attempt in attempt_numbers(self.store, handle.run_id):
            if attempt >= handle.attempt:
                _kill_leftovers(self._job_id(handle, attempt), handle.run_id)

    def _cancel_existing(self, handle: RunHandle) -> None:
        """Ask the supervisor to end the gang (``cancel.request``); ``scancel`` the job if it is queued or the
        supervisor has not answered in 15 s; then end what is left on this machine. Returns once terminal."""
        status = self.status(handle)
        attempt_dir = self.store.attempt_dir(handle.run_id, status.attempt)
        attempt_dir.mkdir(parents=True, exist_ok=True)
        os.close(os.open(attempt_dir / "cancel.request", os.O_WRONLY | os.O_CREAT, 0o600))
        job_id = self._job_id(handle, status.attempt)
        job = cli.jobs(fresh=True).get(job_id)
        deadline = time.monotonic() + (0 if job is None or job.pending else 15)
        while time.monotonic() < deadline and not self.status(handle).state.terminal:
            time.sleep(0.1)
        if not self.status(handle).state.terminal:
            cli.cancel(job_id)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and not self.status(handle).state.terminal:
                time.sleep(0.2)
        _kill_leftovers(job_id, handle.run_id)


def _read_status(path: Path) -> dict[str, Any] | None:
    try:
        data = read_json(path)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "state" in data else None


def _stored(data: dict[str, Any] | None, attempt: int) -> RunStatus | None:
    if data is None:
        return None
    state = RunState(data["state"])
    failure = Failure.from_dict(data["failure"]) if data.get("failure") else None
    if data.get("retrying"):
        return RunStatus(RunState.STARTING, attempt, data.get("started"), None, failure,
                         detail=f"restarting after: {failure.summary() if failure else 'a failure'}")
    return RunStatus(state, attempt, data.get("started"), data.get("ended"), failure, str(data.get("detail") or ""))

