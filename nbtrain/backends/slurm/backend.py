"""``--backend slurm``: one ``sbatch`` job per attempt, the nbtrain supervisor inside it, the store shared.

The kernel's side is thin: :meth:`SlurmBackend.plan` builds the batch script (pure, printable) and asks Slurm
with ``sbatch --test-only`` whether the request can ever run (refused before submission with Slurm's reason);
:meth:`SlurmBackend.submit` writes the attempt's files into the store and runs ``sbatch``. The supervisor
(:mod:`.supervisor`) decides the verdict inside the allocation with the shared rules; :meth:`SlurmBackend.status`
reads it from the store and, while there is none, asks Slurm (one batched ``scontrol show job -o`` per second
per process): the queue reason and position while pending, and a clear verdict when Slurm ended the job itself
(time limit, node failure, preemption, memory) or the supervisor died.

``--max-restarts`` (:mod:`.restarts` decides): a rank failure in a live allocation is restarted by the supervisor
as a new step of the same job. When the allocation is lost (a node failed, Slurm preempted or ended the job, the
supervisor died with it), the attempt's verdict says ``retrying`` with ``restart: new_allocation`` (written by the
supervisor, or here by :meth:`SlurmBackend.status` when Slurm ended the job without a verdict) and the next attempt
is a new ``sbatch`` job, submitted by whichever process next asks for the run's status once the old job has ended
(the kernel's watcher, ``attach`` after a kernel restart, ``nbtrain status``): something that outlives the
allocation. One process submits it: an exclusive lock on the failed attempt's ``restart.claim``, held while the
state is read again and the job submitted, released with its descriptor if that process dies. Slurm's own requeue
is never used (``--no-requeue``): a requeued batch script would rerun an attempt that already has a verdict, under
the same job id, beyond nbtrain's budget.

The store (``NBTRAIN_HOME``) must be on a filesystem every node mounts at the same path, like the Python
environment (``NBTRAIN_PYTHON``, default: this interpreter).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nbtrain.backends.accelerate_config import CONFIG_NAME
from nbtrain.backends.base import Capabilities, Plan, RunHandle, StoreBackedBackend
from nbtrain.backends.launch import LaunchTarget, accelerate_argv, launcher_env
from nbtrain.backends.launchfacts import launch_facts, refuse_strategy, require_accelerate
from nbtrain.backends.slurm import cli
from nbtrain.backends.slurm.jobstate import JobInfo, queued_detail, slurm_verdict
from nbtrain.backends.slurm.request import SlurmRequest
from nbtrain.backends.slurm.restarts import Restart, RestartDecision, decide_restart, restart_note
from nbtrain.backends.slurm.script import batch_script, sbatch_options
from nbtrain.backends.statusfile import read_status as _read_status
from nbtrain.backends.statusfile import status_from as _stored
from nbtrain.backends.storecursor import attempt_numbers
from nbtrain.doctor import Check
from nbtrain.errors import BackendError, EnvironmentProblem
from nbtrain.events import EventKind, EventWriter
from nbtrain.filelock import try_locked
from nbtrain.gang.facts import attempt_checkpointed
from nbtrain.gang.files import (
    CANCEL_REQUEST,
    PLAN,
    STATUS,
    SUPERVISOR_LOG,
    AttemptLayout,
    request_cancel,
    write_attempt_files,
)
from nbtrain.gang.request import AccelerateConfig, Launcher
from nbtrain.model import Failure, RunState, RunStatus
from nbtrain.runtime import context as rt
from nbtrain.spec import Device, JobSpec
from nbtrain.storage.checkpoints import run_checkpoint_root
from nbtrain.store import Store, read_json, write_json_atomic

__all__ = ["SlurmBackend", "job_leftovers"]

SCRIPT_NAME = "job.sbatch"
SLURM_FILE = "slurm.json"  # the attempt's Slurm job id (also written by the supervisor for a restart in place)
CLAIM_FILE = "restart.claim"
SUBMIT_GRACE_S = 60.0  # an attempt with no job id yet is being submitted (sbatch: at most cli.TIMEOUT_S)
JOB_END_S = 10.0  # cancel: the verdict written, how long to wait for Slurm to say the job ended (KillWait + slack)


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

    def doctor_checks(self, settings: Mapping[str, Any]) -> list[Check]:
        """Slurm's client, controller, and the store seen from a node of ``settings["partition"]`` (default one)."""
        from nbtrain.backends.slurm.checks import slurm_checks

        return slurm_checks(self.store, partition=str(settings.get("partition") or "") or None)

    def checkpoint_root(self, spec: JobSpec, run_id: str) -> str:
        """``--checkpoint-dir``/<run id> (on a filesystem every node shares), else inside the run's directory.

        A URL (``s3://…``) stays a URL: see :func:`nbtrain.storage.checkpoints.run_checkpoint_root`."""
        return run_checkpoint_root(spec.checkpoint_dir, run_id, default=self.store.run_dir(run_id) / "checkpoints")

    # -- plan -------------------------------------------------------------------------------------
    def _plan(self, spec: JobSpec, bundle_dir: str, bundle_digest: str, run_id: str, *, attempt: int = 0,
              restart_budget: int | None = None, use_gpu: bool | None = None, check: bool = True,
              cwd: str | None = None) -> Plan[SlurmRequest]:
        """The batch script of ``attempt``; with ``check``, Slurm is asked (``sbatch --test-only``) whether it can run.

        Raises EnvironmentProblem without a Slurm client, controller or accelerate; SpecError with Slurm's own
        reason for a partition, account or QOS it does not know or a request no node can satisfy. ``cwd``: the
        gang's working directory (default: this process's; a restart keeps the first attempt's).
        """
        cwd = cwd or os.getcwd()
        if check:
            cli.require_client("sbatch")
            require_accelerate(self.python, where="on the shared filesystem", probe_others=False)
        if use_gpu is None:
            use_gpu = spec.device is Device.GPU or (spec.device is Device.AUTO and check
                                                   and cli.partition_has_gpus(spec.partition))
        refuse_strategy(spec, use_gpu)
        # the address and port are the launchers' flags (known once the job runs), which win over the config's
        facts = launch_facts(spec, use_gpu=use_gpu, main_port=29500, no_gpu_notice=(
            f"no GPU used: {spec.nodes} Slurm node(s) x {spec.procs} CPU process(es) over gloo"
            + (" (--device cpu)" if spec.device is Device.CPU else " (the partition declares no GPUs)")))
        notices, config_text = list(facts.notices), facts.config_text
        attempt_dir = self.store.attempt_dir(run_id, attempt)
        files = AttemptLayout(attempt_dir)
        config_path = attempt_dir / CONFIG_NAME
        env = launcher_env(spec, run_id=run_id, attempt=attempt, checkpoint_dir=self.checkpoint_root(spec, run_id),
                           attempt_dir=attempt_dir)
        options = sbatch_options(spec, use_gpu=use_gpu, job_name=f"nbtrain-{run_id}",
                                 output=str(files.supervisor_log), chdir=cwd)
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
        request = SlurmRequest(
            run_id=run_id, attempt=attempt, world_size=spec.world_size, use_gpu=use_gpu,
            launchers=tuple(Launcher(node=n, ranks=tuple(range(n * spec.procs, (n + 1) * spec.procs)))
                            for n in range(spec.nodes)),
            attempt_dir=str(attempt_dir), store_root=str(self.store.root), bundle_dir=bundle_dir,
            bundle_digest=bundle_digest, accelerate_config=AccelerateConfig(str(config_path), config_text),
            restart_budget=attempt + spec.max_restarts if restart_budget is None else restart_budget,
            timeout_s=spec.timeout_s, stall_after_s=spec.stall_after_s, hang_timeout_s=spec.hang_timeout_s,
            notices=tuple(notices), describe=describe,
            spec=spec, python=self.python, cwd=cwd, env=env, sbatch_options=tuple(options), script=script,
        )
        return Plan(self.name, run_id, spec, bundle_digest, bundle_dir, request, tuple(notices), attempt)

    def plan_restart(self, spec: JobSpec, bundle_dir: str, bundle_digest: str, run_id: str, *, attempt: int,
                     restart_budget: int, previous: SlurmRequest | None = None) -> Plan[SlurmRequest]:
        """See :meth:`Backend.plan_restart`: no Slurm query (the same request already ran); the device and the
        working directory of the attempt it follows (``previous``, its request) are kept."""
        if previous is None:
            raise BackendError(f"a Slurm restart keeps the device and directory of the attempt it follows: attempt "
                               f"{attempt} of {run_id} was planned without the previous attempt's request")
        return self._plan(spec, bundle_dir, bundle_digest, run_id, attempt=attempt, restart_budget=restart_budget,
                          use_gpu=previous.use_gpu, check=False, cwd=previous.cwd)

    # -- I/O --------------------------------------------------------------------------------------
    def submit(self, plan: Plan[Any]) -> RunHandle:
        """Write the attempt's files into the (shared) store and ``sbatch`` its script; returns at once."""
        request = plan.request
        if not isinstance(request, SlurmRequest):
            raise BackendError(f"the slurm backend cannot submit a plan of the {plan.backend} backend (its request "
                               f"is a {type(request).__name__}, not a SlurmRequest)")
        attempt_dir = write_attempt_files(request)
        script_path = attempt_dir / SCRIPT_NAME
        with open(os.open(script_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o700), "w", encoding="utf-8") as out:
            out.write(request.script)
        job_id = cli.sbatch(str(script_path))
        write_json_atomic(attempt_dir / SLURM_FILE, {"job_id": job_id})
        return RunHandle(self.name, plan.run_id, {"attempt": request.attempt, "job_id": job_id})

    def _job_id(self, handle: RunHandle, attempt: int) -> str:
        """The Slurm job of ``attempt`` ("" while none is known: its job is being submitted)."""
        root = self.store.attempt_dir(handle.run_id, attempt)
        for name, key in ((SLURM_FILE, "job_id"), (STATUS, "slurm_job_id")):
            try:
                found = str(read_json(root / name)[key])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if found:
                return found
        return str(handle.data.get("job_id", "")) if attempt == handle.attempt else ""

    def status(self, handle: RunHandle) -> RunStatus:
        """The supervisor's verdict from the store; while there is none, what Slurm says of the job (see module)."""
        attempts = [a for a in attempt_numbers(self.store, handle.run_id) if a >= handle.attempt]
        if not attempts:
            return RunStatus(RunState.PENDING, attempt=handle.attempt)
        attempt = attempts[-1]
        attempt_dir = self.store.attempt_dir(handle.run_id, attempt)
        data = _read_status(attempt_dir / STATUS)
        found = _stored(data, attempt)
        if found is not None and data and data.get("retrying"):
            if self._follow_restart(handle, attempt):
                return self.status(handle)  # the next attempt exists now, or this one's verdict became final
            return found
        if found is not None and found.state.terminal:
            return found
        job_id = self._job_id(handle, attempt)
        if not job_id:
            return self._unsubmitted(attempt_dir, attempt)
        jobs = cli.jobs()
        job = jobs.get(job_id)
        if job is not None and job.pending:
            return RunStatus(RunState.QUEUED, attempt, detail=queued_detail(job, jobs))
        if job is not None and not job.ended:
            return found or RunStatus(RunState.STARTING, attempt, detail=f"Slurm job {job_id} {job.state.lower()}")
        # the job is over (or gone): the supervisor's verdict, or Slurm's
        data = _read_status(attempt_dir / STATUS)
        found = _stored(data, attempt)
        if found is not None and found.state.terminal:
            return found
        if job is None:
            jobs = cli.jobs(fresh=True)
            job = jobs.get(job_id)
            if job is not None and not job.ended:
                return self.status(handle)
        concluded = self._conclude(handle.run_id, attempt_dir, attempt, job_id, job, data)
        if concluded.state is RunState.FAILED and (_read_status(attempt_dir / STATUS) or {}).get("retrying"):
            return self.status(handle)  # the restart in a new allocation is due: start it now
        return concluded

    def _unsubmitted(self, attempt_dir: Path, attempt: int) -> RunStatus:
        """An attempt whose directory exists without a job id: being submitted, or its submitter died before sbatch
        answered (then FAILED once :data:`SUBMIT_GRACE_S` passed: nothing of it can be running)."""
        try:
            age = time.time() - attempt_dir.stat().st_mtime
        except OSError:
            age = 0.0
        if age < SUBMIT_GRACE_S:
            return RunStatus(RunState.STARTING, attempt, detail=f"submitting the Slurm job of attempt {attempt}")
        failure = Failure(reason=f"attempt {attempt} never got a Slurm job: the process submitting it ended before "
                                 f"sbatch answered; resume the run")
        _final(attempt_dir, attempt, RunState.FAILED, failure, failure.reason)
        return RunStatus(RunState.FAILED, attempt, None, time.time(), failure)

    # -- restarts in a new allocation ---------------------------------------------------------------
    def _follow_restart(self, handle: RunHandle, attempt: int) -> bool:
        """For a FAILED ``attempt`` that says ``retrying``: once its job has ended and no attempt follows it, start
        the next one as a new ``sbatch`` job (or record why not). True when something changed (see module)."""
        run_id = handle.run_id
        if self.store.attempt_dir(run_id, attempt + 1).exists():
            return True  # the supervisor restarted it in place, or another process submitted it
        job_id = self._job_id(handle, attempt)
        job = cli.jobs().get(job_id) if job_id else None
        if job is not None and not job.ended:
            return False  # the supervisor restarts it in place, or exits before the new allocation is asked for
        if job_id:
            job = cli.jobs(fresh=True).get(job_id)
            if job is not None and not job.ended:
                return False
        root = self.store.attempt_dir(run_id, attempt)
        with try_locked(root / CLAIM_FILE) as mine:
            if not mine:
                return False  # another process is submitting it
            return self._restart_claimed(run_id, root, attempt, job)

    def _restart_claimed(self, run_id: str, root: Path, attempt: int, job: JobInfo | None) -> bool:
        """Under the claim: the state read again, then the next attempt submitted, or the final verdict recorded."""
        data = _read_status(root / STATUS) or {}
        if not data.get("retrying") or self.store.attempt_dir(run_id, attempt + 1).exists():
            return True
        failure = Failure.from_dict(data["failure"]) if data.get("failure") else Failure(reason="the attempt failed")
        if (root / CANCEL_REQUEST).exists():
            _final(root, attempt, RunState.CANCELLED, None, "cancelled by the user while restarting")
            return True
        try:
            previous = SlurmRequest.load(root / PLAN)
        except (OSError, ValueError) as error:
            reason = f"{failure.reason}; the automatic restart (attempt {attempt + 1}) could not be planned: {error}"
            _final(root, attempt, RunState.FAILED, Failure.from_dict({**failure.to_dict(), "reason": reason}), reason)
            return True
        budget = previous.restart_budget
        if data.get("restart") != Restart.NEW_ALLOCATION.value:
            # the supervisor meant a new step, but the allocation ended before it started one
            decision = decide_restart(job_state=job.state if job is not None else None, node_failed=None,
                                      cancelled=False, attempt=attempt, restart_budget=budget,
                                      checkpointed=_checkpointed(root))
            if decision.restart is Restart.NONE:
                reason = f"{failure.reason}; {decision.why_not or 'not restarted'}"
                _final(root, attempt, RunState.FAILED, Failure.from_dict({**failure.to_dict(), "reason": reason}),
                       reason)
                return True
        try:
            spec = _without_node(previous.spec, data.get("lost_node"))
            if not Path(previous.bundle_dir).is_dir():
                raise EnvironmentProblem(f"the bundle {previous.bundle_dir} is gone from the store")
            new = self.plan_restart(spec, previous.bundle_dir, previous.bundle_digest, run_id, attempt=attempt + 1,
                                    restart_budget=budget, previous=previous)
            submitted = self.submit(new)
        except Exception as error:  # noqa: BLE001 - whatever stops the restart becomes the verdict, never a hang
            reason = f"{failure.reason}; the automatic restart (attempt {attempt + 1}) could not be submitted: {error}"
            _final(root, attempt, RunState.FAILED, Failure.from_dict({**failure.to_dict(), "reason": reason}), reason)
            return True
        EventWriter(root / "events" / "restart.jsonl", "slurm-restart", attempt=attempt).emit(
            EventKind.NOTICE, message=f"attempt {attempt + 1} submitted in a new allocation: Slurm job "
                                      f"{submitted.data['job_id']}")
        return True

    def _conclude(self, run_id: str, attempt_dir: Path, attempt: int, job_id: str, job: Any,
                  data: dict[str, Any] | None) -> RunStatus:
        """Write the verdict of an attempt whose job ended without the supervisor's (once, by one reader)."""
        _kill_leftovers(job_id, run_id)
        cancelled = (attempt_dir / CANCEL_REQUEST).exists()
        # nothing the batch script writes is here: the nodes do not see this host's store (NBTRAIN_HOME)
        unseen = job is not None and not any((attempt_dir / name).exists()
                                             for name in (SUPERVISOR_LOG, "supervisor.json", STATUS))
        state, failure = slurm_verdict(job, job_id, cancel_requested=cancelled,
                                       supervisor_log=str(attempt_dir / SUPERVISOR_LOG),
                                       unshared_store=str(self.store.root) if unseen else None)
        decision = RestartDecision(Restart.NONE)
        note = ""
        if state is RunState.FAILED:
            try:
                budget = SlurmRequest.load(attempt_dir / PLAN).restart_budget
            except (OSError, ValueError):
                budget = attempt
            decision = decide_restart(job_state=job.state if job is not None else None, node_failed=None,
                                      cancelled=cancelled, attempt=attempt, restart_budget=budget,
                                      checkpointed=_checkpointed(attempt_dir), store_unseen=unseen, job_ended=True)
            note = restart_note(decision, attempt=attempt, restart_budget=budget, job_id=job_id)
            if note and decision.restart is Restart.NONE and failure is not None:
                failure = Failure.from_dict({**failure.to_dict(), "reason": f"{failure.reason}; {note}"})
        retrying = decision.restart is not Restart.NONE
        ended = time.time()
        started = (data or {}).get("started")
        verdict = {**(data or {}), "state": state.value, "attempt": attempt, "failure": failure.to_dict() if failure
                   else None, "ended": ended, "retrying": retrying, "updated": ended, "concluded_by": "observer",
                   "slurm_job_id": job_id, "restart": decision.restart.value}
        try:
            fd = os.open(attempt_dir / "verdict.claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            for _ in range(50):  # another reader is writing the same verdict
                written = _stored(_read_status(attempt_dir / STATUS), attempt)
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
                reason = failure.summary() if failure else "cancelled by the user"
                writer.emit(EventKind.STATE, state=state.value, reason=f"{reason}; {note}" if retrying else reason,
                            retrying=retrying)
                write_json_atomic(attempt_dir / STATUS, verdict)
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
        # ask the latest attempt first: a restart that is due then records CANCELLED instead of being submitted
        latest = [a for a in attempt_numbers(self.store, handle.run_id) if a >= handle.attempt]
        if latest:
            _request_cancel(self.store.attempt_dir(handle.run_id, latest[-1]))
        status = self.status(handle)
        attempt_dir = self.store.attempt_dir(handle.run_id, status.attempt)
        _request_cancel(attempt_dir)
        job_id = self._job_id(handle, status.attempt)
        if not job_id:  # being submitted by another process: wait for its job id
            deadline = time.monotonic() + SUBMIT_GRACE_S
            while not (job_id := self._job_id(handle, status.attempt)) and time.monotonic() < deadline:
                time.sleep(0.2)
        job = cli.jobs(fresh=True).get(job_id) if job_id else None
        deadline = time.monotonic() + (0 if job is None or job.pending else 15)
        while time.monotonic() < deadline and not self.status(handle).state.terminal:
            time.sleep(0.1)
        if not self.status(handle).state.terminal and job_id:
            cli.cancel(job_id)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and not self.status(handle).state.terminal:
                time.sleep(0.2)
        # the verdict is written a moment before the supervisor (the batch script) exits: return once Slurm says
        # the job has ended, so that nothing of it runs any more (bounded: a job stuck completing is Slurm's)
        deadline = time.monotonic() + JOB_END_S
        while job_id and time.monotonic() < deadline:
            job = cli.jobs(fresh=True).get(job_id)
            if job is None or job.ended:
                break
            time.sleep(0.1)
        _kill_leftovers(job_id, handle.run_id)
        later = self.status(handle)
        if later.attempt != status.attempt and not later.state.terminal:
            self._cancel_existing(handle)  # an attempt submitted while this one was being cancelled


def _without_node(spec: JobSpec, node: object) -> JobSpec:
    """``spec`` asking Slurm for an allocation without ``node`` (the one the failed attempt lost), if any."""
    if not isinstance(node, str) or not node:
        return spec
    excluded = [n for n in str(spec.sbatch_options.get("exclude") or "").split(",") if n]
    return dataclasses.replace(spec, sbatch_options={**spec.sbatch_options,
                                                     "exclude": ",".join(dict.fromkeys([*excluded, node]))})


def _request_cancel(attempt_dir: Path) -> None:
    attempt_dir.mkdir(parents=True, exist_ok=True)
    request_cancel(attempt_dir)


def _checkpointed(attempt_dir: Path) -> bool:
    return attempt_checkpointed(attempt_dir / "events")


def _final(root: Path, attempt: int, state: RunState, failure: Failure | None, reason: str) -> None:
    """Record ``state`` as the final verdict of a ``retrying`` attempt whose restart will not happen."""
    out = EventWriter(root / "events" / "restart.jsonl", "slurm-restart", attempt=attempt)
    if failure is not None:
        out.emit(EventKind.FAILURE, **failure.to_dict())
    out.emit(EventKind.STATE, state=state.value, reason=reason)
    data = _read_status(root / STATUS) or {"attempt": attempt}
    write_json_atomic(root / STATUS, {**data, "state": state.value, "retrying": False, "restart": "none",
                                             "failure": failure.to_dict() if failure else data.get("failure"),
                                             "ended": data.get("ended") or time.time(), "updated": time.time(),
                                             "detail": reason if state is RunState.CANCELLED else ""})
