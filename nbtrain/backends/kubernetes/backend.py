"""The Kubernetes backend: the same cell as a gang of pods (Indexed Job, PyTorchJob, JobSet or TrainJob).

``plan`` is pure (manifests from :mod:`.manifests`); ``submit`` creates them; everything the run
reports travels in its pods' logs and is mirrored into the store by a :class:`~.mirror.Mirror`
running in whichever process watches the run, so ``logs()``, ``attach`` and ``Run.result()`` keep
working after the pods are gone. See :class:`nbtrain.backends.base.Backend` for the contracts.

The event key of an attempt (what tells the pods' event lines from text they print): ``submit`` makes it,
keeps it in the attempt directory (``event.key``, 0600; the store is trusted) and sends it to the cluster
only inside the Secret it creates with the workload (owned by it); the pods read it by ``secretKeyRef``.
A mirror reads it from the store, or from the Secret when the file is missing (attach from another
machine). It is never in a plan, a printed or written manifest, a log or the bundle.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from nbtrain.backends.accelerate_config import accelerate_config, render, strategy_refusal
from nbtrain.backends.base import Capabilities, Plan, RunHandle, StoreBackedBackend
from nbtrain.backends.kubernetes import manifests as mf
from nbtrain.backends.kubernetes import names as nm
from nbtrain.backends.kubernetes import trainjob as tj
from nbtrain.backends.kubernetes.api import KubeApi, kubeconfig_namespace
from nbtrain.backends.kubernetes.attempts import cancel_restart, follow, write_handle
from nbtrain.backends.kubernetes.checks import doctor_checks, export_check
from nbtrain.backends.kubernetes.config import KubeOptions
from nbtrain.backends.kubernetes.files import AttemptFiles, write_private_text
from nbtrain.backends.kubernetes.leftovers import delete_leftover
from nbtrain.backends.kubernetes.mirror import Mirror
from nbtrain.backends.kubernetes.planning import build_manifests, describe_plan, device_of, image_of
from nbtrain.backends.kubernetes.podstate import parse_time
from nbtrain.backends.kubernetes.request import KubernetesRequest
from nbtrain.backends.kubernetes.submitting import apply_objects, check_local_queue, forget_key, read_event_key
from nbtrain.backends.kubernetes.target import Target, target_of
from nbtrain.backends.kubernetes.validate import check_spec
from nbtrain.backends.storecursor import StoreCursor
from nbtrain.errors import BackendError, NbtrainError, SpecError
from nbtrain.events import new_event_key
from nbtrain.model import Batch, Failure, RunState, RunStatus
from nbtrain.spec import JobSpec
from nbtrain.store import Store

if TYPE_CHECKING:
    from nbtrain.doctor import Check

__all__ = ["KubernetesBackend", "stop_mirrors"]

CANCEL_TIMEOUT_S = 60.0

_mirrors: dict[Path, Mirror] = {}  # attempt dir -> the mirror this process runs for it
_mirrors_lock = threading.Lock()


def stop_mirrors(timeout: float = 10.0) -> None:
    """Stop every mirror of this process and wait for its threads (tests; interpreter shutdown)."""
    with _mirrors_lock:
        mirrors = list(_mirrors.values())
        _mirrors.clear()
    for mirror in mirrors:
        mirror.stop()
    deadline = time.monotonic() + timeout
    for mirror in mirrors:
        mirror.join(max(0.0, deadline - time.monotonic()))


class KubernetesBackend(StoreBackedBackend):
    """Runs gangs as pods on a Kubernetes cluster. See :class:`nbtrain.backends.base.Backend`."""

    name = "kubernetes"
    # Checkpoints and automatic restarts through a PersistentVolumeClaim every pod mounts (--volume; refused
    # without one by plan()): a restart is a new workload, see .attempts.
    capabilities = Capabilities(restarts=True, checkpoints=True, gpus=True, multi_node=True, shared_store=False)

    def __init__(self, store: Store | None = None, *, options: KubeOptions | None = None) -> None:
        super().__init__(store)
        self.options = options or KubeOptions.from_env()
        self._apis: dict[str | None, KubeApi] = {}
        self._lock = threading.Lock()

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop this process's log mirrors (the next process that follows a run takes its mirror over)."""
        stop_mirrors(timeout_s)

    def api(self, context: str | None = None) -> KubeApi:
        """The (lazily connected) API client for kubeconfig ``context`` (None: the configured one)."""
        with self._lock:
            if context not in self._apis:
                self._apis[context] = KubeApi(self.options, context)
            return self._apis[context]

    # -- plan (pure) ----------------------------------------------------------------------------
    def ranks_python(self) -> str | None:
        """None: the ranks run in the image, whose packages the pod's preflight checks (naming the image)."""
        return None

    def _plan(self, spec: JobSpec, bundle_dir: str, bundle_digest: str, run_id: str, *, attempt: int = 0,
              restart_budget: int | None = None) -> Plan[KubernetesRequest]:
        """Build the manifests of ``spec`` (no API call; reads the kubeconfig for its namespace).

        Raises SpecError for what the cluster would refuse: no image, invalid names or quantities, a ``--volume``
        or ``--checkpoint-dir`` nbtrain cannot use, secret-looking ``--env`` values, a bundle over the ConfigMap
        limit. ``restart_budget``: the last attempt automatic restarts may reach (default ``attempt +
        --max-restarts``). The steps are :mod:`.planning`'s.
        """
        options = self.options
        image = image_of(spec, options)
        namespace = spec.namespace or options.namespace or kubeconfig_namespace(options) or "default"
        check_spec(spec, image=image, namespace=namespace)
        use_gpu, notices = device_of(spec, options)
        if spec.queue:
            notices.append(f"queued through Kueue (queue {spec.queue}): the pods start when the whole gang is admitted")
        names = nm.object_names(run_id, flavor=spec.flavor, nodes=spec.nodes, attempt=attempt)
        if spec.flavor == "trainjob":  # no TTL on a TrainJob: say so (docs/kubernetes.md, "TrainJob")
            notices += tj.notices(tj.runtime_ref(options.trainjob_runtime), names.base, namespace)
        refusal = strategy_refusal(spec, use_gpu)
        if refusal is not None:
            raise SpecError(refusal)
        config, _ = accelerate_config(spec, use_gpu=use_gpu, main_address=names.main_address, main_port=options.port)
        built = build_manifests(spec, run_id=run_id, attempt=attempt, image=image, use_gpu=use_gpu, names=names,
                                namespace=namespace, options=options, bundle_dir=bundle_dir,
                                bundle_digest=bundle_digest, config_text=render(config))
        request = KubernetesRequest(
            run_id=run_id, attempt=attempt, namespace=namespace, context=options.context, flavor=spec.flavor,
            kind=mf.WORKLOAD_KINDS[spec.flavor].kind, name=names.base, nodes=spec.nodes, procs=spec.procs,
            world_size=spec.world_size, queue=spec.queue, timeout_s=spec.timeout_s,
            ttl_s=None if spec.flavor == "trainjob" else options.ttl_s,  # a TrainJob's Job has its runtime's
            restart_budget=attempt + spec.max_restarts if restart_budget is None else restart_budget,
            use_gpu=use_gpu, objects=built.objects, event_key_secret=built.secret,
            attempt_dir=str(self.store.attempt_dir(run_id, attempt)), notices=tuple(notices),
            describe=describe_plan(spec, built, run_id=run_id, names=names, namespace=namespace, image=image,
                                   options=options),
        )
        return Plan(self.name, run_id, spec, bundle_digest, bundle_dir, request, tuple(notices), attempt)

    def plan_restart(self, spec: JobSpec, bundle_dir: str, bundle_digest: str, run_id: str, *, attempt: int,
                     restart_budget: int, previous: KubernetesRequest | None = None) -> Plan[KubernetesRequest]:
        """The plan of an automatic restart (:mod:`.attempts`): the same checkpoint root, the original budget."""
        from nbtrain.flags import check_supported

        check_supported(spec, self.name)
        return self._plan(spec, bundle_dir, bundle_digest, run_id, attempt=attempt, restart_budget=restart_budget)

    # -- I/O ------------------------------------------------------------------------------------
    def submit(self, plan: Plan[Any], *, dry_run: bool = False) -> RunHandle:
        """Create the workload, then what it owns (ownerReferences from its uid); start following it.

        A fresh event key is made first and kept in the attempt directory (``event.key``, 0600); the
        event-key Secret is created with it in its data, right after the workload. ``manifests.yaml``
        records what was created, the Secret without its data. If an owned object cannot be created, the
        workload is deleted again (its owned objects go with it) and the error raised.
        ``dry_run``: a server-side dry run with strict field validation (nothing is created, no key made).
        With ``--queue``, the Kueue LocalQueue must exist first (else the Job would wait, suspended, forever).
        """
        request = plan.request
        if not isinstance(request, KubernetesRequest):
            raise BackendError(f"the kubernetes backend cannot submit a plan of the {plan.backend} backend")
        api = self.api(request.context)
        root = Path(request.attempt_dir)
        if request.queue:
            check_local_queue(api, request.queue, request.namespace)
        key = None if dry_run else new_event_key()
        if key is not None:
            AttemptFiles(root).write_key(key)  # before any pod can exist: whoever follows the run finds it
        try:
            owner, applied = apply_objects(api, request, key, dry_run=dry_run)
        except NbtrainError:
            forget_key(root, key)
            raise
        handle = RunHandle(self.name, plan.run_id, request.handle_data(owner["metadata"].get("uid")))
        if dry_run:
            return handle
        write_private_text(root / "manifests.yaml", yaml.safe_dump_all(applied, sort_keys=False))  # 0600, dirs 0700
        write_handle(root, handle)
        self._mirror(handle)
        return handle

    def event_key(self, handle: RunHandle) -> bytes:
        """The event key of ``handle``'s attempt: from the store, else from its Secret (then kept in the store).

        Raises NbtrainError saying why when neither has it (a run submitted before event keys existed, or a
        Secret that went with its workload while no process followed the run).
        """
        secret = handle.data.get("event_key_secret")
        return read_event_key(self.api(handle.data.get("context")), AttemptFiles(self._root(handle)),
                              run_id=handle.run_id, secret=str(secret) if secret else None,
                              namespace=str(handle.data.get("namespace", "")))

    def _target(self, handle: RunHandle, attempt: int | None = None) -> Target:
        return target_of(handle.run_id, handle.data, attempt)

    def _root(self, handle: RunHandle) -> Path:
        return self.store.attempt_dir(handle.run_id, int(handle.data.get("attempt", 0)))

    def _mirror(self, handle: RunHandle) -> Mirror | None:
        """The live mirror of ``handle`` in this process, started if no process follows the run yet."""
        root = self._root(handle)
        with _mirrors_lock:
            mirror = _mirrors.get(root)
            if mirror is not None and mirror.alive:
                return mirror
            if _terminal(AttemptFiles(root).read_status()):
                return None
            mirror = Mirror(self.api(handle.data.get("context")), self._target(handle), root,
                            event_key=functools.partial(self.event_key, handle), log_streams=self.options.log_streams)
            if not mirror.start():
                return None  # another process mirrors this run
            _mirrors[root] = mirror
            return mirror

    def status(self, handle: RunHandle) -> RunStatus:
        """From this process's mirror; else status.json (the verdict, or another mirroring process's view).

        Of ``handle``'s attempt or of the automatic restarts that followed it (started here when due: .attempts);
        a failed attempt that is being restarted is STARTING, "restarting after" its failure.
        """
        if "name" not in handle.data:
            return RunStatus(RunState.PENDING)
        handle = follow(self, handle)
        status = self._attempt_status(handle)
        if status.state is RunState.FAILED and (AttemptFiles(self._root(handle)).read_status() or {}).get("retrying"):
            why = status.failure.summary() if status.failure else "a failure"
            return RunStatus(RunState.STARTING, status.attempt, status.started, None, status.failure,
                             detail=f"restarting after: {why}")
        return status

    def _attempt_status(self, handle: RunHandle) -> RunStatus:
        """The state of ``handle``'s own attempt."""
        root = self._root(handle)
        with _mirrors_lock:
            mirror = _mirrors.get(root)
        if mirror is not None and (mirror.alive or mirror.verdict is not None):
            return mirror.status()
        data = AttemptFiles(root).read_status()
        if data is not None and _terminal(data):
            return _status_from(data)
        mirror = self._mirror(handle)
        if mirror is not None:
            return mirror.status()
        data = AttemptFiles(root).read_status()
        if data is not None:
            return _status_from(data)
        return RunStatus(RunState.STARTING, int(handle.data.get("attempt", 0)),
                         detail="another process is following this run")

    def cursor(self, handle: RunHandle) -> _KubeCursor:
        """A cursor over every attempt's mirrored events and rank logs, from the beginning."""
        return _KubeCursor(self, handle)

    # -- hooks (see Backend) ---------------------------------------------------------------------
    def doctor_checks(self, settings: Mapping[str, Any]) -> list[Check]:
        """Where this process would reach a cluster from (``settings`` unused): see :func:`.checks.doctor_checks`."""
        return doctor_checks()

    def check_export(self, spec: JobSpec, bundle: Any) -> str | None:
        """The job's manifests rendered and schema-checked: see :func:`.checks.export_check`."""
        return export_check(self, spec, bundle)

    def before_log_read(self, handle: RunHandle) -> None:
        """A finished pod's log is copied into the store first (bounded wait)."""
        if "name" not in handle.data:
            return
        handle = follow(self, handle)
        mirror = self._mirror(handle)
        if mirror is not None:
            mirror.wait_drained(10.0, finished_only=True)

    def cancel(self, handle: RunHandle) -> None:
        """See :meth:`Backend.cancel`; a restart that is due but not started is cancelled first (never started)."""
        if "name" in handle.data and cancel_restart(self, handle):
            return
        super().cancel(handle)

    def _after_terminal(self, handle: RunHandle) -> None:
        """A workload the verdict left behind is deleted: the run is FAILED or CANCELLED and its workload still
        exists (the mirror's own delete failed, or nobody followed the run), or some of its pods still run or wait.
        A NOTICE names what was deleted; a finished success is left for its TTL (see ``leftovers``)."""
        if "name" not in handle.data:
            return
        handle = follow(self, handle, start=False)
        delete_leftover(self.api(handle.data.get("context")), self._target(handle), self.status(handle).state,
                        AttemptFiles(self._root(handle)).events_dir, timeout_s=CANCEL_TIMEOUT_S)

    def _cancel_existing(self, handle: RunHandle) -> None:
        """Delete the workload with foreground propagation (its pods, ConfigMap and Service go with it).

        Returns once the run is terminal (BackendError if pods remain after 60 s).
        """
        if "name" not in handle.data:
            return
        handle = follow(self, handle, start=False)
        target = self._target(handle)
        mirror = self._mirror(handle)
        if mirror is not None:
            mirror.request_cancel()
        else:
            AttemptFiles(self._root(handle)).request_cancel()
        api = self.api(handle.data.get("context"))
        api.delete(target.kind, target.name, target.namespace, propagation="Foreground")
        deadline = time.monotonic() + CANCEL_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.status(handle).state.terminal:
                return
            time.sleep(0.2)
        pods, _ = api.list_items("Pod", target.namespace, label_selector=target.selector)
        raise BackendError(
            f"cancel of run {handle.run_id}: {target.kind} {target.name} was deleted but {len(pods)} pod(s) still "
            f"exist after {CANCEL_TIMEOUT_S:.0f} s in namespace {target.namespace}; check them with "
            f"kubectl get pods -n {target.namespace} -l {target.selector}"
        )

    def list(self) -> list[RunHandle]:
        """Runs in the store that used this backend, and nbtrain workloads in the namespace that it lacks.

        Newest first. Raises the API's error when the cluster cannot be listed.
        """
        handles = [(r.created, RunHandle(self.name, r.run_id, r.handle)) for r in self.store.records()
                   if r.backend == self.name]
        known = {h.run_id for _, h in handles}
        namespace = self.options.namespace or kubeconfig_namespace(self.options) or "default"
        items, _ = self.api().list_items("Job", namespace, label_selector=f"{nm.LABEL_MANAGED_BY}=nbtrain")
        for item in items:
            meta = item.get("metadata") or {}
            run_id = str((meta.get("annotations") or {}).get(nm.ANNOTATION_RUN_ID) or meta.get("name"))
            if run_id in known:
                continue
            known.add(run_id)
            spec = item.get("spec") or {}
            data = {"attempt": int((meta.get("labels") or {}).get(nm.LABEL_ATTEMPT, 0)), "namespace": namespace,
                    "context": self.options.context, "flavor": "job", "kind": "Job", "name": meta.get("name"),
                    "nodes": int(spec.get("completions") or 1), "procs": 1, "uid": meta.get("uid")}
            handles.append((parse_time(meta.get("creationTimestamp")) or 0.0, RunHandle(self.name, run_id, data)))
        return [h for _, h in sorted(handles, key=lambda x: x[0], reverse=True)]


def _terminal(data: dict[str, Any] | None) -> bool:
    return data is not None and RunState(str(data.get("state"))).terminal


def _status_from(data: dict[str, Any]) -> RunStatus:
    failure = Failure.from_dict(data["failure"]) if data.get("failure") else None
    return RunStatus(RunState(str(data["state"])), int(data.get("attempt", 0)), data.get("started"),
                     data.get("ended"), failure, str(data.get("detail", "")))


class _KubeCursor:
    """Keeps the run mirrored (in this process or another) and tails the attempt directories."""

    def __init__(self, backend: KubernetesBackend, handle: RunHandle) -> None:
        self.backend = backend
        self.handle = handle
        self.files = StoreCursor(backend.store, handle.run_id)

    def poll(self, *, max_lines: int = 50_000) -> Batch:
        """See :class:`nbtrain.backends.base.RunCursor`. ``max_lines=0`` skips logs."""
        if "name" in self.handle.data:
            try:
                self.backend._mirror(follow(self.backend, self.handle))
            except NbtrainError:
                pass  # no cluster configuration here: what was mirrored before is still readable
        return self.files.poll(max_lines=max_lines)
