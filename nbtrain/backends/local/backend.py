"""The embedded default backend: a gang of local processes under one detached supervisor per attempt.

Nodes are simulated by one ``accelerate launch`` per node on loopback (``--machine_rank i``), so a
``--nodes 2 --gpus 2`` cell exercises real multi-node rendezvous on one machine.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nbtrain.backends.accelerate_config import CONFIG_NAME
from nbtrain.backends.base import Capabilities, Plan, RunHandle, StoreBackedBackend
from nbtrain.backends.launch import LaunchTarget, accelerate_argv, device_env, launcher_env
from nbtrain.backends.launchfacts import accelerate_available as _accelerate_available
from nbtrain.backends.launchfacts import accelerate_missing, launch_facts, refuse_strategy
from nbtrain.backends.local.gpus import GpuInventory, detect_gpus
from nbtrain.backends.local.ports import free_port
from nbtrain.backends.statusfile import read_status as _read_status
from nbtrain.backends.statusfile import status_from
from nbtrain.backends.storecursor import attempt_numbers
from nbtrain.errors import BackendError, EnvironmentProblem, SpecError
from nbtrain.events import EventKind, EventWriter
from nbtrain.gang import procs
from nbtrain.gang.files import AttemptLayout, request_cancel, write_attempt_files
from nbtrain.gang.procs import pid_gone
from nbtrain.gang.request import AccelerateConfig, GangRequest, Launcher, WarmRequest
from nbtrain.model import Failure, RunState, RunStatus
from nbtrain.runtime import watchdog
from nbtrain.spec import Device, JobSpec, Strategy
from nbtrain.storage.checkpoints import run_checkpoint_root
from nbtrain.store import Store, write_json_atomic

__all__ = ["LocalBackend"]

#: A CPU gang of more than this many processes per core is refused unless --oversubscribe (it would only crawl).
OVERSUBSCRIBE_FACTOR = 4

_children: list[subprocess.Popen[bytes]] = []  # supervisors started by this process, reaped lazily


def _reap() -> None:
    for child in list(_children):
        if child.poll() is not None:
            _children.remove(child)


class LocalBackend(StoreBackedBackend):
    """Runs gangs as processes on this machine. See :class:`nbtrain.backends.base.Backend`."""

    name = "local"
    capabilities = Capabilities(restarts=True, checkpoints=True, gpus=True, multi_node=True, shared_store=True)

    def __init__(self, store: Store | None = None, *, python: str | None = None, gpus: GpuInventory | None = None) -> None:
        super().__init__(store)
        self.python = python or os.environ.get("NBTRAIN_PYTHON") or sys.executable
        self._gpus = gpus

    @property
    def gpus(self) -> GpuInventory:
        """GPUs of this machine (detected once, lazily)."""
        if self._gpus is None:
            self._gpus = detect_gpus()
        return self._gpus

    # -- plan (pure) ------------------------------------------------------------------------------
    def checkpoint_root(self, spec: JobSpec, run_id: str) -> str:
        """Where this run's checkpoints live: ``--checkpoint-dir``/<run id>, else inside the run's directory.

        A URL (``s3://…``) stays a URL: see :func:`nbtrain.storage.checkpoints.run_checkpoint_root`."""
        return run_checkpoint_root(spec.checkpoint_dir, run_id, default=self.store.run_dir(run_id) / "checkpoints")

    def _plan(self, spec: JobSpec, bundle_dir: str, bundle_digest: str, run_id: str, *, attempt: int = 0,
              restart_budget: int | None = None) -> Plan[GangRequest]:
        """Resolve the device, map GPUs to nodes and build one launcher command per node. Writes nothing.

        ``attempt`` > 0 plans a restart or resume of an existing run (same checkpoint root);
        ``restart_budget`` is the last attempt number automatic restarts may reach (default:
        ``attempt + spec.max_restarts``). Raises EnvironmentProblem when accelerate is missing, GPUs are
        asked for but absent or too few, or no port is free.
        """
        if not _accelerate_available(self.python):
            raise accelerate_missing(self.python)
        inventory = self.gpus
        use_gpu = spec.device is Device.GPU or (spec.device is Device.AUTO and inventory.count > 0)
        self._refuse(spec, use_gpu, inventory)
        port = free_port()
        no_gpu = (f"no GPU used: running {spec.nodes} node(s) x {spec.procs} CPU process(es) over gloo"
                  + (" (--device cpu)" if spec.device is Device.CPU else " (no GPU found on this machine)"))
        facts = launch_facts(spec, use_gpu=use_gpu, main_port=port,
                             no_gpu_notice=no_gpu if spec.procs_per_node > 0 else None)
        attempt_dir = self.store.attempt_dir(run_id, attempt)
        config_path = attempt_dir / CONFIG_NAME
        launchers = self._launchers(spec, run_id, attempt, bundle_dir, use_gpu=use_gpu, port=port)
        wanted = spec.nodes * spec.procs
        describe = "\n".join(
            [f"device:    {'GPU ' + ','.join(inventory.ids[:wanted]) if use_gpu else 'CPU (gloo)'}",
             f"rendezvous: 127.0.0.1:{port}"]
            + [f"node {x.node} (ranks {x.ranks[0]}-{x.ranks[-1]}): " + " ".join(x.argv) for x in launchers]
            + [f"accelerate config ({config_path}):", *("  " + line for line in facts.config_text.splitlines())]
            + list(facts.team_lines)
        )
        if spec.warm:
            describe += ("\nwarm:      ranks forked from a warm gang of this shape (started if none; idle "
                         f"TTL {spec.warm_ttl_s:g} s); each node runs the command above's settings")
        notices = tuple(facts.notices)
        request = GangRequest(
            run_id=run_id, attempt=attempt, world_size=spec.world_size, use_gpu=use_gpu, launchers=launchers,
            attempt_dir=str(attempt_dir), store_root=str(self.store.root), bundle_dir=bundle_dir,
            bundle_digest=bundle_digest, accelerate_config=AccelerateConfig(str(config_path), facts.config_text),
            restart_budget=attempt + spec.max_restarts if restart_budget is None else restart_budget,
            timeout_s=spec.timeout_s, stall_after_s=spec.stall_after_s, hang_timeout_s=spec.hang_timeout_s,
            notices=notices, describe=describe, port=port,
            warm=WarmRequest(ttl_s=spec.warm_ttl_s) if spec.warm else None,
        )
        return Plan(self.name, run_id, spec, bundle_digest, bundle_dir, request, notices, attempt)

    def _refuse(self, spec: JobSpec, use_gpu: bool, inventory: GpuInventory) -> None:
        """What this machine cannot run: GPUs absent or too few, the strategy on this device, warm shapes a warm gang
        does not reproduce, CPU gangs far above the core count (EnvironmentProblem/SpecError naming the fix)."""
        if use_gpu and inventory.count == 0:
            raise EnvironmentProblem(
                "--device gpu: this machine has no visible GPU (nvidia-smi found none); "
                "use --device cpu, or --backend kubernetes to run on a GPU cluster."
            )
        refuse_strategy(spec, use_gpu)
        if spec.warm and spec.strategy is Strategy.DEEPSPEED:
            raise SpecError("--warm --strategy deepspeed: DeepSpeed starts its ranks through its own launcher, which "
                            "a warm gang does not reproduce yet; drop --warm (a cold run) or use --strategy ddp/fsdp.")
        if spec.warm and spec.world_size == 1 and spec.strategy is Strategy.DDP:
            # Accelerate starts one process without torchelastic (no --multi_gpu: its simple launcher), which a warm
            # gang's agents do not reproduce (nbtrain.warm.rankenv); refused here, not inside the started gang
            raise SpecError(f"--warm needs more than one process: --nodes {spec.nodes} --gpus {spec.procs_per_node} "
                            "(world size 1) is a single-process launch, which a warm gang does not reproduce; use "
                            "--gpus 2 (or --nodes 2) for a warm gang, or drop --warm (a cold run).")
        wanted = spec.nodes * spec.procs
        if use_gpu and wanted > inventory.count:
            raise EnvironmentProblem(
                f"--nodes {spec.nodes} --gpus {spec.procs} needs {wanted} GPUs but this machine has "
                f"{inventory.count} ({', '.join(inventory.names) or 'unknown model'}); lower --gpus/--nodes "
                "or use --backend kubernetes."
            )
        cores = os.cpu_count() or 1
        if not use_gpu and spec.world_size > OVERSUBSCRIBE_FACTOR * cores and not spec.oversubscribe:
            raise EnvironmentProblem(
                f"--nodes {spec.nodes} --gpus {spec.procs_per_node} would start {spec.world_size} CPU processes on this "
                f"machine's {cores} CPU core(s) (more than {OVERSUBSCRIBE_FACTOR} per core); lower --nodes/--gpus, use "
                "--backend kubernetes, or pass --oversubscribe to start them anyway."
            )

    def _launchers(self, spec: JobSpec, run_id: str, attempt: int, bundle_dir: str, *, use_gpu: bool,
                   port: int) -> tuple[Launcher, ...]:
        """One ``accelerate launch`` per node: its argv, environment (its GPUs), directory and ranks."""
        attempt_dir = self.store.attempt_dir(run_id, attempt)
        target = LaunchTarget("nbtrain.runtime.worker", (bundle_dir,))
        threads = max(1, (os.cpu_count() or 1) // max(1, spec.world_size))
        launchers: list[Launcher] = []
        for node in range(spec.nodes):
            ids = self.gpus.ids[node * spec.procs : (node + 1) * spec.procs] if use_gpu else ()
            env = launcher_env(spec, run_id=run_id, attempt=attempt, checkpoint_dir=self.checkpoint_root(spec, run_id),
                               attempt_dir=attempt_dir, node_rank=node, devices=device_env(use_gpu, tuple(ids)),
                               omp_threads=threads)
            argv = accelerate_argv(
                spec, python=self.python, use_gpu=use_gpu, node_rank=node,
                main_address="127.0.0.1", main_port=port, target=target, config_file=str(attempt_dir / CONFIG_NAME),
            )
            ranks = tuple(range(node * spec.procs, (node + 1) * spec.procs))
            launchers.append(Launcher(node=node, ranks=ranks, argv=tuple(argv), env=env, cwd=os.getcwd(),
                                      gpus=tuple(ids)))
        return tuple(launchers)

    def plan_restart(self, spec: JobSpec, bundle_dir: str, bundle_digest: str, run_id: str, *, attempt: int,
                     restart_budget: int, previous: GangRequest | None = None) -> Plan[GangRequest]:
        """See :meth:`Backend.plan_restart`: same checkpoint root, the original restart budget (``previous`` unused:
        the device and ports are chosen again on this machine)."""
        return self._plan(spec, bundle_dir, bundle_digest, run_id, attempt=attempt, restart_budget=restart_budget)

    # -- I/O --------------------------------------------------------------------------------------
    def submit(self, plan: Plan[Any]) -> RunHandle:
        """Write plan.json and start the detached supervisor; returns at once.

        ``--warm``: the run first claims the warm gang of its key (:mod:`nbtrain.warm`), starting one in the
        background when there is none; a gang busy with another run refuses it (GangBusy) before anything starts.
        """
        request = plan.request
        if not isinstance(request, GangRequest):
            raise BackendError(f"the local backend cannot submit a plan of the {plan.backend} backend (its request "
                               f"is a {type(request).__name__}, not a GangRequest)")
        module = "nbtrain.backends.local.supervisor"
        gang_dir: Path | None = None
        if request.warm is not None:
            gang_dir = self._claim_warm_gang(request, request.warm)
            request = request.on_warm_gang(gang_dir)
            module = "nbtrain.warm.supervisor"
        try:
            return self._start_supervisor(plan, request, module)
        except BaseException:
            if gang_dir is not None:
                from nbtrain.warm import registry

                registry.release(gang_dir, plan.run_id)
            raise

    def _claim_warm_gang(self, request: GangRequest, warm: WarmRequest) -> Path:
        from nbtrain.warm import registry
        from nbtrain.warm.key import gang_key

        key, facts = gang_key(request.launchers, request.accelerate_config.text, os.environ,
                              registry.environment_stamp(self.python))
        return registry.acquire(self.store, key, facts, run_id=request.run_id, ttl_s=float(warm.ttl_s),
                                python=self.python)

    def _start_supervisor(self, plan: Plan[Any], request: GangRequest, module: str) -> RunHandle:
        attempt_dir = write_attempt_files(request)
        env = dict(os.environ)
        env["NBTRAIN_SUPERVISOR_OF"] = plan.run_id
        env.pop(procs.MARKER, None)
        if request.warm is not None and request.warm.gang_dir is not None:
            from nbtrain.warm import registry

            # a ready gang's agent of node 0 forks the supervisor: no interpreter start on the way to the ranks
            pid = registry.fork_supervisor(Path(request.warm.gang_dir), attempt_dir, env=env, cwd=os.getcwd(),
                                           log=AttemptLayout(attempt_dir).supervisor_log)
            if pid:
                return RunHandle(self.name, plan.run_id, {"attempt": request.attempt, "supervisor_pid": pid})
        with open(os.open(AttemptLayout(attempt_dir).supervisor_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as log:
            try:
                child = subprocess.Popen(
                    [self.python, "-m", module, str(attempt_dir)],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True, env=env, cwd=os.getcwd(),
                )
            except OSError as error:
                raise BackendError(f"could not start the local supervisor with {self.python}: {error}") from error
        _children.append(child)
        return RunHandle(self.name, plan.run_id, {"attempt": request.attempt, "supervisor_pid": child.pid})

    def _attempts(self, run_id: str) -> list[int]:
        return attempt_numbers(self.store, run_id)

    def status(self, handle: RunHandle) -> RunStatus:
        """The verdict of the handle's attempt, or of the automatic restarts that followed it.

        A supervisor that died without a verdict (killed by the OOM killer, say) is noticed here: what is
        left of its gang is ended first, then the FAILED verdict is written, so a terminal run never leaves
        a process behind.
        """
        _reap()
        attempts = [a for a in self._attempts(handle.run_id) if a >= handle.attempt]
        if not attempts:
            return RunStatus(RunState.PENDING, attempt=handle.attempt)
        attempt = attempts[-1]
        path = AttemptLayout(self.store.attempt_dir(handle.run_id, attempt)).status
        data = _read_status(path)
        if data is None:
            pid = int(handle.data.get("supervisor_pid") or 0)
            if attempt == handle.attempt and pid and pid_gone(pid)[0] and _read_status(path) is None:
                return self._orphaned(handle.run_id, path, {"supervisor_pid": pid, "attempt": attempt})
            return RunStatus(RunState.STARTING, attempt=attempt)
        if not data.get("retrying") and not RunState(data["state"]).terminal and not _supervisor_alive(data):
            data = _read_status(path) or data  # it may have written its verdict just before exiting
            if not RunState(data["state"]).terminal:
                return self._orphaned(handle.run_id, path, data)
        found = status_from(data, attempt)
        assert found is not None  # data is a status
        return found

    def _orphaned(self, run_id: str, path: Path, data: dict[str, Any]) -> RunStatus:
        """The verdict of an attempt whose supervisor died without one (written once, by one reader)."""
        pid = data.get("supervisor_pid")
        procs.terminate_gang(run_id, grace_s=2.0)
        if _disk_full(path.parent):
            failure = Failure(reason=f"no space left on device at {path.parent} (the nbtrain store is full); free "
                                     "space there or set NBTRAIN_HOME to a disk with room, then resume the run")
        else:
            failure = Failure(reason=f"the local supervisor (pid {pid}) died without a verdict (killed, or out of "
                                     f"memory); its gang was ended; see {path.parent / 'supervisor.log'}")
        ended = time.time()
        verdict = {**data, "state": RunState.FAILED.value, "failure": failure.to_dict(), "ended": ended,
                   "retrying": False, "updated": ended, "concluded_by": "observer"}
        claim = path.parent / "verdict.claim"
        try:
            fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            written = _read_status(path)  # another reader is writing the same verdict
            if written is not None and RunState(written["state"]).terminal:
                verdict = written
        except OSError:
            pass  # a full or read-only store: report the verdict without recording it
        else:
            os.close(fd)
            try:
                attempt = int(data.get("attempt", 0))
                writer = EventWriter(path.parent / "events" / "observer.jsonl", "observer", attempt=attempt)
                writer.emit(EventKind.FAILURE, **failure.to_dict())
                writer.emit(EventKind.STATE, state=RunState.FAILED.value, reason=failure.summary())
                write_json_atomic(path, verdict)
            except OSError:
                pass
        stored = Failure.from_dict(verdict["failure"]) if verdict.get("failure") else failure
        return RunStatus(RunState.FAILED, int(data.get("attempt", 0)), data.get("started"), verdict.get("ended"), stored)

    def _after_terminal(self, handle: RunHandle) -> None:
        """Leftovers of a crashed supervisor, if any."""
        procs.terminate_gang(handle.run_id, grace_s=2.0)

    def _cancel_existing(self, handle: RunHandle) -> None:
        """Ask the supervisor to end the gang (SIGTERM + a request file); wait up to 15 s for the verdict.

        The supervisor is signalled only when it is still the process that wrote status.json (pid and
        start time), never a process that reused its PID. If it is gone, its gang is ended directly.
        """
        status = self.status(handle)
        attempt_dir = self.store.attempt_dir(handle.run_id, status.attempt)
        request_cancel(attempt_dir)
        data = _read_status(AttemptLayout(attempt_dir).status) or {}
        pid = int(data.get("supervisor_pid") or 0)
        if pid and _supervisor_alive(data):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.status(handle).state.terminal:
                break
            time.sleep(0.1)
        procs.terminate_gang(handle.run_id, grace_s=2.0)
        deadline = time.monotonic() + 5  # the supervisor exits right after its verdict: let it finish
        while pid and _supervisor_alive(data) and time.monotonic() < deadline:
            _reap()
            time.sleep(0.05)


def _supervisor_alive(data: dict[str, Any]) -> bool:
    """The supervisor that wrote ``data`` still runs (its pid and start time; a reused PID is not it)."""
    ident = data.get("supervisor")
    if isinstance(ident, str) and ident:
        return watchdog.alive(ident)
    pid = int(data.get("supervisor_pid") or 0)  # status written by an older nbtrain: pid only
    return bool(pid) and not pid_gone(pid)[0]


def _disk_full(path: Path) -> bool:
    try:
        return shutil.disk_usage(path).free < 256 * 1024
    except OSError:
        return False
