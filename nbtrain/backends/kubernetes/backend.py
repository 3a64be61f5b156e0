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

import base64
import binascii
import functools
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from nbtrain.backends.accelerate_config import CONFIG_NAME, accelerate_config, render, strategy_refusal
from nbtrain.backends.base import Capabilities, Plan, RunHandle, StoreBackedBackend
from nbtrain.backends.kubernetes import manifests as mf
from nbtrain.backends.kubernetes import names as nm
from nbtrain.backends.kubernetes import trainjob as tj
from nbtrain.backends.kubernetes.api import KubeApi, kubeconfig_namespace
from nbtrain.backends.kubernetes.attempts import cancel_restart, follow, write_handle
from nbtrain.backends.kubernetes.config import KubeOptions
from nbtrain.backends.kubernetes.errors import KubeApiError, KubeSpecError
from nbtrain.backends.kubernetes.files import KEY_FILE, AttemptFiles, write_private_text
from nbtrain.backends.kubernetes.leftovers import delete_leftover
from nbtrain.backends.kubernetes.mirror import Mirror, Target
from nbtrain.backends.kubernetes.override import read_pod_template
from nbtrain.backends.kubernetes.payload import RUNTIME_PATH, build_payload
from nbtrain.backends.kubernetes.pod import EVENT_KEY_FIELD, PodInputs, checkpoint_root, preflight_files
from nbtrain.backends.kubernetes.podstate import parse_time
from nbtrain.backends.kubernetes.validate import check_spec
from nbtrain.backends.storecursor import StoreCursor
from nbtrain.errors import BackendError, NbtrainError, SpecError
from nbtrain.events import decode_event_key, encode_event_key, new_event_key
from nbtrain.model import Batch, Failure, RunState, RunStatus
from nbtrain.runtime.shipping import runtime_files
from nbtrain.spec import Device, JobSpec
from nbtrain.store import Store

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
              restart_budget: int | None = None) -> Plan:
        """Build the manifests of ``spec`` (no API call; reads the kubeconfig for its namespace).

        Raises SpecError for what the cluster would refuse: no image, invalid names or quantities, a ``--volume``
        or ``--checkpoint-dir`` nbtrain cannot use, secret-looking ``--env`` values, a bundle over the ConfigMap
        limit. ``restart_budget``: the last attempt automatic restarts may reach (default ``attempt +
        --max-restarts``).
        """
        options = self.options
        image = spec.image or options.image
        if not image:
            raise SpecError(
                "--image: the kubernetes backend needs a container image with Python, torch and accelerate "
                "(nbtrain itself is not needed); pass --image or set NBTRAIN_K8S_IMAGE."
            )
        namespace = spec.namespace or options.namespace or kubeconfig_namespace(options) or "default"
        check_spec(spec, image=image, namespace=namespace)
        if spec.device is Device.GPU and spec.procs_per_node == 0:
            raise SpecError("--device gpu with --gpus 0: ask for at least one GPU per pod (--gpus 1).")
        use_gpu = spec.procs_per_node > 0 and (
            spec.device is Device.GPU or (spec.device is Device.AUTO and options.device == "gpu"))
        notices: list[str] = []
        if not use_gpu:
            why = "--device cpu" if spec.device is Device.CPU else (
                "--gpus 0" if spec.procs_per_node == 0 else "NBTRAIN_K8S_DEVICE=cpu")
            notices.append(f"no GPU requested: {spec.nodes} pod(s) x {spec.procs} CPU process(es) over gloo ({why})")
        if spec.queue:
            notices.append(f"queued through Kueue (queue {spec.queue}): the pods start when the whole gang is admitted")
        names = nm.object_names(run_id, flavor=spec.flavor, nodes=spec.nodes, attempt=attempt)
        if spec.flavor == "trainjob":  # no TTL on a TrainJob: say so (docs/kubernetes.md, "TrainJob")
            notices += tj.notices(tj.runtime_ref(options.trainjob_runtime), names.base, namespace)
        refusal = strategy_refusal(spec, use_gpu)
        if refusal is not None:
            raise SpecError(refusal)
        config, _ = accelerate_config(spec, use_gpu=use_gpu, main_address=names.main_address, main_port=options.port)
        config_text = render(config)
        # the generated Accelerate config travels with the runtime: no config in the image changes the run
        payload = build_payload(bundle_dir, {**runtime_files(), **preflight_files(),
                                             CONFIG_NAME: config_text.encode("utf-8")}, configmap=names.configmap)
        secret = mf.event_key_secret_name(names.base)
        inputs = PodInputs(
            run_id=run_id, attempt=attempt, image=image, use_gpu=use_gpu, flavor=spec.flavor,
            main_address=names.main_address, configmap=names.configmap, payload=payload,
            labels=mf.labels_for(run_id, attempt), options=options, event_key_secret=secret,
            config_file=f"{RUNTIME_PATH}/{CONFIG_NAME}",
            override=read_pod_template(spec.pod_template) if spec.pod_template else None,
        )
        objects = mf.build_objects(spec, names=names, namespace=namespace, inputs=inputs, bundle_digest=bundle_digest)
        if payload.parts:  # a bundle too big for one ConfigMap: its parts, owned by the workload like the first
            first = next(o for o in objects if o["kind"] == "ConfigMap")
            objects += payload.part_configmaps(first)
        workload = mf.WORKLOAD_KINDS[spec.flavor]
        collectives = "NCCL" if spec.gpu_resource == "nvidia.com/gpu" else "the device's torch.distributed backend"
        device = (f"GPU: {spec.gpu_resource} {spec.procs} per pod ({collectives})" if use_gpu else "CPU (gloo)")
        describe = "\n".join([
            f"cluster:   namespace {namespace}" + (f", context {options.context}" if options.context else ""),
            f"workload:  {workload.kind} {names.base} ({spec.flavor}); image {image}",
            f"device:    {device}",
            f"rendezvous: {names.main_address}:{options.port}",
            f"bundle:    ConfigMap {names.configmap}, {payload.size / 1024:.0f} KiB (bundle + nbtrain runtime)" if not
            payload.parts else (f"bundle:    {len(payload.parts)} part ConfigMaps {payload.part_name(0)}.. "
                                f"({sum(map(len, payload.parts)) / 2**20:.1f} MiB .tar.gz, sha256 "
                                f"{payload.archive_sha256[:12]}…, checked and unpacked by each pod's preflight) and "
                                f"ConfigMap {names.configmap}, {payload.size / 1024:.0f} KiB (nbtrain runtime)"),
            f"events:    pod stdout lines tagged with a per-attempt key, made at submit, in Secret {secret}",
            *([f"volumes:   {', '.join(spec.volumes)}; checkpoints in {checkpoint_root(spec, run_id)}"
               + (f"; up to {spec.max_restarts} automatic restart(s), each a new {workload.kind}"
                  if spec.max_restarts else "")] if spec.volumes else []),
            *([f"pod template: {spec.pod_template}, merged into every pod (strategic merge):",
               _indented(inputs.override.fragment)] if inputs.override is not None else []),
            "manifests (applied in this order):",
            mf.describe(objects),
        ])
        request: dict[str, Any] = {
            "run_id": run_id,
            "attempt": attempt,
            "namespace": namespace,
            "context": options.context,
            "flavor": spec.flavor,
            "kind": workload.kind,
            "name": names.base,
            "nodes": spec.nodes,
            "procs": spec.procs,
            "world_size": spec.world_size,
            "queue": spec.queue,
            "timeout_s": spec.timeout_s,
            "ttl_s": None if spec.flavor == "trainjob" else options.ttl_s,  # a TrainJob's Job has its runtime's
            "restart_budget": attempt + spec.max_restarts if restart_budget is None else restart_budget,
            "use_gpu": use_gpu,
            "objects": objects,
            "event_key_secret": secret,
            "attempt_dir": str(self.store.attempt_dir(run_id, attempt)),
            "notices": notices,
            "describe": describe,
        }
        return Plan(self.name, run_id, spec, bundle_digest, bundle_dir, request, tuple(notices), attempt)

    def plan_restart(self, spec: JobSpec, bundle_dir: str, bundle_digest: str, run_id: str, *, attempt: int,
                     restart_budget: int, previous: Any = None) -> Plan:
        """The plan of an automatic restart (:mod:`.attempts`): the same checkpoint root, the original budget."""
        from nbtrain.flags import check_supported

        check_supported(spec, self.name)
        return self._plan(spec, bundle_dir, bundle_digest, run_id, attempt=attempt, restart_budget=restart_budget)

    # -- I/O ------------------------------------------------------------------------------------
    def submit(self, plan: Plan, *, dry_run: bool = False) -> RunHandle:
        """Create the workload, then what it owns (ownerReferences from its uid); start following it.

        A fresh event key is made first and kept in the attempt directory (``event.key``, 0600); the
        event-key Secret is created with it in its data, right after the workload. ``manifests.yaml``
        records what was created, the Secret without its data. If an owned object cannot be created, the
        workload is deleted again (its owned objects go with it) and the error raised.
        ``dry_run``: a server-side dry run with strict field validation (nothing is created, no key made).
        With ``--queue``, the Kueue LocalQueue must exist first (else the Job would wait, suspended, forever).
        """
        request = plan.request
        api = self.api(request["context"])
        namespace = request["namespace"]
        objects: list[dict[str, Any]] = list(request["objects"])
        root = Path(request["attempt_dir"])
        if request.get("queue"):
            _check_local_queue(api, str(request["queue"]), namespace)
        key = None if dry_run else new_event_key()
        if key is not None:
            AttemptFiles(root).write_key(key)  # before any pod can exist: whoever follows the run finds it
        try:
            created = api.create(objects[0], namespace, dry_run=dry_run)
        except NbtrainError:
            _forget_key(root, key)
            raise
        owner = {**created, "apiVersion": objects[0]["apiVersion"], "kind": objects[0]["kind"]}
        owner.setdefault("metadata", {}).setdefault("uid", "dry-run")
        applied = [objects[0]]
        try:
            for obj in objects[1:]:
                owned = mf.owned_by(obj, owner)
                if owned["kind"] == "Secret":
                    _create_secret(api, mf.with_event_key(owned, key) if key is not None else owned, namespace,
                                   dry_run=dry_run, key=key)
                else:
                    api.create(owned, namespace, dry_run=dry_run)
                applied.append(mf.redacted(owned))
        except NbtrainError:
            if not dry_run:
                try:
                    api.delete(request["kind"], request["name"], namespace)
                except NbtrainError:
                    pass  # the original error is the one to report
                _forget_key(root, key)
            raise
        data = {k: request[k] for k in ("attempt", "namespace", "context", "flavor", "kind", "name", "nodes",
                                         "procs", "world_size", "queue", "timeout_s", "notices")}
        data["restart_budget"] = int(request.get("restart_budget", 0))
        data["ttl_s"] = request.get("ttl_s")
        data["uid"] = owner["metadata"].get("uid")
        data["event_key_secret"] = request.get("event_key_secret")
        handle = RunHandle(self.name, plan.run_id, data)
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
        files = AttemptFiles(self._root(handle))
        key = files.read_key()
        if key is not None:
            return key
        name = handle.data.get("event_key_secret")
        if not name:
            raise NbtrainError(f"run {handle.run_id} was submitted without an event key (by an older nbtrain)")
        namespace = str(handle.data["namespace"])
        secret = _read_secret(self.api(handle.data.get("context")), str(name), namespace)
        if secret is None:
            raise NbtrainError(
                f"{files.root / KEY_FILE} is missing and Secret {name} in namespace {namespace} no longer exists "
                "(it is deleted with the workload)")
        try:
            key = decode_event_key(base64.b64decode((secret.get("data") or {}).get(EVENT_KEY_FIELD) or ""))
        except (binascii.Error, ValueError):
            key = None
        if key is None:
            raise NbtrainError(f"Secret {name} in namespace {namespace} has no valid {EVENT_KEY_FIELD!r}")
        files.write_key(key)
        return key

    def _target(self, handle: RunHandle, attempt: int | None = None) -> Target:
        d = handle.data
        if "name" not in d:
            raise BackendError(f"run {handle.run_id} has no Kubernetes handle (it was never submitted).")
        return Target(
            run_id=handle.run_id, attempt=int(d.get("attempt", 0)) if attempt is None else attempt,
            namespace=str(d["namespace"]), flavor=str(d.get("flavor", "job")), kind=str(d.get("kind", "Job")),
            name=str(d["name"]), nodes=int(d.get("nodes", 1)), procs=int(d.get("procs", 1)),
            queue=d.get("queue"), timeout_s=d.get("timeout_s"), notices=tuple(d.get("notices") or ()),
            restart_budget=int(d.get("restart_budget") or 0),
            ttl_s=None if d.get("ttl_s") is None else int(d["ttl_s"]),
        )

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


def _indented(fragment: Mapping[str, Any]) -> str:
    """A ``--pod-template`` fragment as the plan shows it (YAML, indented)."""
    text = yaml.safe_dump(dict(fragment), sort_keys=False, default_flow_style=False, width=120)
    return "\n".join(f"  {line}" for line in text.splitlines())


def _forget_key(root: Path, key: bytes | None) -> None:
    """Remove the key file of a submit that failed (nothing on the cluster uses it)."""
    if key is not None:
        (root / KEY_FILE).unlink(missing_ok=True)


# -- Secrets -------------------------------------------------------------------------------------------
# Through KubeApi (the one I/O module) like every object; an error message never carries the key.

def _create_secret(api: KubeApi, obj: Mapping[str, Any], namespace: str, *, dry_run: bool, key: bytes | None) -> None:
    """Create the event-key Secret ``obj`` (``dry_run``: server-side, strict)."""
    try:
        api.create(dict(obj), namespace, dry_run=dry_run)
    except NbtrainError as error:
        if key is None:
            raise
        raise _without_key(error, key) from None


def _read_secret(api: KubeApi, name: str, namespace: str) -> dict[str, Any] | None:
    """The Secret ``name``, or None when it does not exist."""
    return api.get("Secret", name, namespace)


def _without_key(error: NbtrainError, key: bytes) -> NbtrainError:
    """``error`` with every form of ``key`` in its message replaced (the API may echo a request body)."""
    secret = encode_event_key(key)
    text = str(error)
    for form in (secret, base64.b64encode(secret.encode("ascii")).decode("ascii")):
        text = text.replace(form, "<event key>")
    clean = type(error).__new__(type(error))
    clean.__dict__.update(error.__dict__)
    clean.args = (text,)
    return clean


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



def _check_local_queue(api: KubeApi, queue: str, namespace: str) -> None:
    """Refuse ``--queue`` naming no Kueue LocalQueue in ``namespace`` (or a cluster without Kueue): Kueue ignores
    such a Job, which would stay suspended, "waiting for Kueue", until someone deletes it. A notebook identity
    that may not read LocalQueues cannot check: the run goes ahead (the shipped Role allows it)."""
    try:
        if api.get("LocalQueue", queue, namespace) is not None:
            return
        names = sorted(str(q["metadata"]["name"]) for q in api.list_items("LocalQueue", namespace)[0])
    except KubeApiError as error:
        if error.status == 403:
            return
        if error.status == 404:
            raise KubeSpecError(
                f"--queue {queue}: this cluster has no Kueue (no localqueues.kueue.x-k8s.io resource), so the Job "
                "would stay suspended forever; nothing was submitted. Drop --queue, or install Kueue and create a "
                f"LocalQueue {queue!r} in namespace {namespace!r}.", 404) from None
        raise
    there = ", ".join(names) if names else "none"
    raise KubeSpecError(
        f"--queue {queue}: there is no Kueue LocalQueue {queue!r} in namespace {namespace!r} (LocalQueues there: "
        f"{there}), so Kueue would never admit the Job and it would wait, suspended, forever; nothing was submitted. "
        f"Use one of those queues, ask your platform team for a LocalQueue {queue!r} in {namespace!r} (pointing at a "
        "ClusterQueue), or drop --queue to run without Kueue.", 404)
