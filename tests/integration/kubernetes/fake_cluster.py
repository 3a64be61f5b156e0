"""The controllers behind the fake API server: a Job controller and a kubelet that runs pods as processes.

Job controller: Indexed Jobs (one pod per index, hostname ``<job>-<index>``), ``suspend`` (no pods
until admitted; suspending a running Job deletes its pods), podFailurePolicy (FailJob on exit codes,
Ignore on DisruptionTarget), backoffLimit, activeDeadlineSeconds, ttlSecondsAfterFinished, deletion
with propagation (Foreground/Background delete the pods; Orphan leaves them) and garbage collection
of objects whose ownerReferences point at a deleted owner. Pods it cannot create (``pod_quota``, or
``pod_admission``: a Pod Security admission that rejects them) show only as FailedCreate Events of the Job;
with ``pod_admission`` set, a stand-in for the training operator records FailedCreatePod on PyTorchJobs, and one for
the JobSet's Job controller FailedCreate on a JobSet's first Job.
PyTorchJobs and JobSets run no pods here; their stand-ins only fail them at their deadline (``runPolicy``'s, the
replicated Job's ``activeDeadlineSeconds``) with the conditions the real controllers write (:meth:`_owner_deadline`).
TrainJobs run: Kubeflow Trainer's stand-in (fake_trainer.py) makes their Job from the runtime a test gives it.

Kueue, once :meth:`FakeCluster.add_local_queue` installed it: a Workload for each queued (labelled, suspended) Job, as
Kueue's job framework makes it (named ``job-<name>-<hash>``, labelled ``kueue.x-k8s.io/job-uid``, owned by the Job),
pending with ``QuotaReserved`` False and ``kueue_pending`` as the message (no condition while it is None: not yet
tried); :meth:`~FakeCluster.admit` reserves quota, admits and unsuspends the Job; :meth:`~FakeCluster.evict` marks it
Evicted, suspends the Job again (its pods go) and puts it back in line. :meth:`~FakeCluster.install_visibility` serves
the on-demand visibility API (pending positions; ``kueue_ahead`` Workloads of others in line first).

Kubelet: each pod's command runs as a local process with the pod's environment (``value``,
``fieldRef``, ``secretKeyRef`` — from Secret objects created through the API, or ``secrets`` preset by a
test; ``optional`` honoured; ``$(VAR)`` expansion; HOSTNAME; JOB_COMPLETION_INDEX), its ConfigMap
volumes written out as files, emptyDirs as directories, ``persistentVolumeClaim`` volumes as one host directory per
claim (:meth:`FakeCluster.add_claim`; shared by every pod and attempt that mounts it, like a ReadWriteMany volume) —
mount paths rewritten to them — and DNS
names of pods under a headless Service mapped to 127.0.0.1. A pod that mounts a claim that does not exist stays
Pending, unschedulable, with the scheduler's message (``persistentvolumeclaim "NAME" not found``). Its merged stdout/stderr is the pod log.
Every process of a pod carries ``FAKE_POD_UID`` so deleting the pod ends all of them, as a container
runtime would (torchelastic's workers run in their own sessions). Log lines are timestamped when read (served
with ``timestamps``/``sinceTime`` as the API does); ``log_keep_lines`` makes the kubelet rotate: a new log
request sees only the newest lines. ``image_lacks`` plays images without some Python packages (a stock
``python:3.11`` has no Accelerate): importing them fails in that image's pods.
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fake_apiserver import ApiError, FakeApiServer, Store, now_rfc3339
from fake_trainer import RESOURCE as TRAINJOBS
from fake_trainer import FakeTrainer

POD_MARKER = "FAKE_POD_UID"
NAMESPACE = "nbtrain-test"  # the namespace of the test kubeconfig's context


def _pids_with(marker: str) -> list[int]:
    needle = f"\0{marker}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in b"\0" + (entry / "environ").read_bytes() + b"\0":
                state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
                if state not in ("Z", "X"):
                    found.append(int(entry.name))
        except (OSError, IndexError):
            continue
    return found


def kill_marked(marker: str, grace_s: float) -> None:
    """SIGTERM every process whose environment has ``marker``; SIGKILL what is left after ``grace_s``."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        pids = _pids_with(marker)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and _pids_with(marker):
            time.sleep(0.05)


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: known names are replaced, ``$$`` is a literal ``$``."""
    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", replace, text)


def log_timestamp() -> str:
    """Now as the kubelet stamps log lines (RFC 3339, nanoseconds, UTC)."""
    ns = time.time_ns()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 10**9)) + f".{ns % 10**9:09d}Z"


class PodRuntime:
    """One pod's process and its log: complete lines, each with the time it was read, as the kubelet keeps them.

    ``keep_lines``: like a kubelet that rotates container logs, only the newest lines are served to a new log
    request (an open follow stream goes on across rotation, as the kubelet's does).
    """

    def __init__(self, uid: str, keep_lines: int | None = None) -> None:
        self.uid = uid
        self.lines: list[tuple[str, bytes]] = []  # (timestamp, line with its newline; the last may lack it)
        self.partial = b""
        self.keep_lines = keep_lines
        self.cond = threading.Condition()
        self.started = False
        self.done = False
        self.process: subprocess.Popen[bytes] | None = None
        self.exit_code: int | None = None

    def first_kept(self) -> int:
        """Index of the oldest line a new log request is served."""
        with self.cond:
            return 0 if self.keep_lines is None else max(0, len(self.lines) - self.keep_lines)

    def log_bytes(self) -> bytes:
        """The whole log as written (no rotation, no timestamps): for tests to look at."""
        with self.cond:
            return b"".join(line for _, line in self.lines)

    def read_lines(self, index: int, wait: float) -> tuple[list[tuple[str, bytes]], bool]:
        """Lines from ``index`` on (waiting up to ``wait`` for some), and whether the log is complete."""
        with self.cond:
            if len(self.lines) <= index and not self.done:
                self.cond.wait(timeout=wait)
            return list(self.lines[index:]), self.done and len(self.lines) <= index

    def pump(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for chunk in iter(lambda: self.process.stdout.read1(65536), b""):  # type: ignore[union-attr]
            stamp = log_timestamp()
            with self.cond:
                *complete, self.partial = (self.partial + chunk).split(b"\n")
                self.lines += [(stamp, line + b"\n") for line in complete]
                self.cond.notify_all()
        self.exit_code = self.process.wait()
        kill_marked(f"{POD_MARKER}={self.uid}", 0.5)  # the container ends with its main process
        with self.cond:
            if self.partial:
                self.lines.append((log_timestamp(), self.partial))
                self.partial = b""
            self.done = True
            self.cond.notify_all()


class FakeCluster:
    """Store + controllers + HTTP server. Use as a context manager; ``kill_all()`` in teardown."""

    def __init__(self, workdir: Path, *, base_env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.store = Store()
        self.base_env = dict(base_env or {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"})
        self.secrets: dict[tuple[str, str], dict[str, str]] = {}
        self.unschedulable: str | None = None
        self.pod_quota: str | None = None  # when set, creating pods fails (FailedCreate event), like a ResourceQuota
        self.pod_admission: str | None = None  # when set, an admission (Pod Security, a webhook) rejects every pod
        self.image_lacks: dict[str, set[str]] = {}  # image -> top-level Python packages it does not have
        self.log_keep_lines: int | None = None  # when set, the kubelet serves only the newest lines (rotation)
        self.kueue_pending: str | None = None  # Kueue's QuotaReserved=False message for pending Workloads
        self.kueue_ahead = 0  # pending Workloads of others ahead of the run's in its LocalQueue (visibility API)
        self.tamper: Callable[[str, dict[str, Any]], None] | None = None  # changes each object as it is created
        self.runtimes: dict[str, PodRuntime] = {}
        self.job_times: dict[str, dict[str, float]] = {}
        self.counted: set[str] = set()
        self.server = FakeApiServer(self)
        self.trainer = FakeTrainer(self)  # Kubeflow Trainer v2 (TrainJobs): fake_trainer.py
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.RLock()
        self._loop = threading.Thread(target=self._control, name="fake-controllers", daemon=True)

    def __enter__(self) -> FakeCluster:
        self.server.start()
        self._loop.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self.server.stop()
        self.kill_all()

    def kill_all(self) -> None:
        for uid in list(self.runtimes):
            kill_marked(f"{POD_MARKER}={uid}", 0.2)

    # -- test helpers ---------------------------------------------------------------------------
    def admit(self, namespace: str, name: str) -> None:
        """What Kueue does on admission: reserve quota and admit the Job's Workload (if Kueue is installed), then
        unsuspend the Job."""
        with self.store.lock:
            workload = self.workload_of(namespace, name)
            if workload is not None:
                workload["status"]["admission"] = {"clusterQueue": "cluster-queue", "podSetAssignments": []}
                _condition(workload, "QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cluster-queue")
                _condition(workload, "Admitted", "True", "Admitted", "The workload is admitted")
                _condition(workload, "Evicted", "False", "Admitted", "The workload is admitted")
                self.store.update("workloads.kueue.x-k8s.io", namespace, workload)
            job = copy.deepcopy(self.store.get("jobs.batch", namespace, name))
            job["spec"]["suspend"] = False
            self.store.update("jobs.batch", namespace, job)
        self._wake.set()

    def evict(self, namespace: str, name: str, reason: str, message: str, *, pending: str | None = None) -> None:
        """What Kueue does when it evicts the Job's Workload (preemption, PodsReadyTimeout): Evicted, quota released,
        the Job suspended again (its pods are deleted) and the Workload pending again (``pending``: its message)."""
        with self.store.lock:
            workload = self.workload_of(namespace, name)
            assert workload is not None, f"no Workload for Job {name}"
            workload["status"].pop("admission", None)
            _condition(workload, "Evicted", "True", reason, message)
            _condition(workload, "Admitted", "False", "NoReservation", "The workload has no reservation")
            _condition(workload, "QuotaReserved", "False", "Pending", pending or message)
            self.store.update("workloads.kueue.x-k8s.io", namespace, workload)
            job = copy.deepcopy(self.store.get("jobs.batch", namespace, name))
            job["spec"]["suspend"] = True
            self.store.update("jobs.batch", namespace, job)
        self._wake.set()

    def workload_of(self, namespace: str, job: str) -> dict[str, Any] | None:
        """A copy of the Kueue Workload of Job ``job`` (None: none yet)."""
        with self.store.lock:
            found = self.store.find("jobs.batch", namespace, job)
            uid = found["metadata"]["uid"] if found else None
            for workload in self.store.items("workloads.kueue.x-k8s.io", namespace):
                if uid and workload["metadata"]["labels"].get("kueue.x-k8s.io/job-uid") == uid:
                    return copy.deepcopy(workload)
        return None

    def install_visibility(self) -> None:
        """Serve Kueue's on-demand visibility API (localqueues/pendingworkloads)."""
        self.store.crds.add("localqueues/pendingworkloads.visibility.kueue.x-k8s.io")

    def pending_workloads(self, namespace: str, queue: str) -> dict[str, Any]:
        """The visibility API's PendingWorkloadsSummary of LocalQueue ``queue`` (0-based positions, oldest first)."""
        with self.store.lock:
            if self.store.find("localqueues.kueue.x-k8s.io", namespace, queue) is None:
                raise_not_found(f'localqueues.kueue.x-k8s.io "{queue}" not found')
            pending = [w for w in self.store.items("workloads.kueue.x-k8s.io", namespace)
                       if w["spec"].get("queueName") == queue and not _is_true(w, "QuotaReserved")]
            pending.sort(key=lambda w: int(w["metadata"]["resourceVersion"]))
            items = [{"metadata": {"name": w["metadata"]["name"], "namespace": namespace,
                                   "ownerReferences": w["metadata"].get("ownerReferences") or []},
                      "priority": 0, "localQueueName": queue, "positionInLocalQueue": self.kueue_ahead + index,
                      "positionInClusterQueue": self.kueue_ahead + index + 3}
                     for index, w in enumerate(pending)]
        return {"kind": "PendingWorkloadsSummary", "apiVersion": "visibility.kueue.x-k8s.io/v1beta1",
                "metadata": {}, "items": items}

    def add_local_queue(self, namespace: str, name: str) -> None:
        """Install Kueue (its LocalQueue and Workload resources, if not yet) and create the LocalQueue ``name``."""
        self.store.crds.update({"localqueues.kueue.x-k8s.io", "workloads.kueue.x-k8s.io"})
        self.store.create("localqueues.kueue.x-k8s.io", namespace, {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": {"name": name},
            "spec": {"clusterQueue": "cluster-queue"}})

    def add_claim(self, namespace: str, name: str) -> Path:
        """Create the PersistentVolumeClaim ``name`` (bound at once); returns the host directory that backs it."""
        self.store.create("persistentvolumeclaims", namespace, {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound"}})
        return self.claim_dir(namespace, name)

    def claim_dir(self, namespace: str, name: str) -> Path:
        """The host directory behind claim ``name`` (made on first use)."""
        path = self.workdir / "claims" / namespace / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def runtime(self, uid: str) -> PodRuntime | None:
        return self.runtimes.get(uid)

    def pods(self, namespace: str = "nbtrain-test") -> list[dict[str, Any]]:
        return [copy.deepcopy(p) for p in self.store.items("pods", namespace)]

    # -- API hooks ------------------------------------------------------------------------------
    def validate(self, resource: str, namespace: str, obj: dict[str, Any]) -> None:
        """The admission webhooks: raise the ApiError a webhook answers for ``obj`` (Trainer's, for TrainJobs)."""
        if resource == TRAINJOBS:
            self.trainer.validate(namespace, obj)

    def created(self, resource: str, namespace: str, obj: dict[str, Any]) -> None:
        if self.tamper is not None:  # something in the cluster changes the object once it is stored
            with self.store.lock:
                stored = self.store.find(resource, namespace, obj["metadata"]["name"])
                if stored is not None:
                    self.tamper(resource, stored)
        self._wake.set()

    def delete(self, resource: str, namespace: str, name: str, policy: str) -> None:
        with self.store.lock:
            obj = self.store.find(resource, namespace, name)
            if obj is None:
                return
            if resource == "pods":
                self._delete_pod(namespace, obj)
                return
            if resource != "jobs.batch" or policy == "Orphan":
                self._remove_owner(resource, namespace, name, orphan=policy == "Orphan")
                return
            obj = copy.deepcopy(obj)
            obj["metadata"]["deletionTimestamp"] = now_rfc3339()
            obj["metadata"]["finalizers"] = ["foregroundDeletion"] if policy == "Foreground" else []
            self.store.update(resource, namespace, obj)
            for pod in self._pods_of(namespace, obj):
                self._delete_pod(namespace, pod)
            if policy != "Foreground":
                self._remove_owner(resource, namespace, name, orphan=False)
        self._wake.set()

    def _remove_owner(self, resource: str, namespace: str, name: str, *, orphan: bool) -> None:
        owner = self.store.remove(resource, namespace, name)
        if owner is None:
            return
        uid = owner["metadata"]["uid"]
        for kind in ("pods", "services", "configmaps", "secrets", "workloads.kueue.x-k8s.io"):
            for obj in list(self.store.items(kind, namespace)):
                refs = obj["metadata"].get("ownerReferences") or []
                if not any(r.get("uid") == uid for r in refs):
                    continue
                if orphan:
                    obj["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                    self.store.update(kind, namespace, obj)
                elif kind == "pods":
                    self._delete_pod(namespace, obj)
                else:
                    self.store.remove(kind, namespace, obj["metadata"]["name"])

    def _delete_pod(self, namespace: str, pod: dict[str, Any]) -> None:
        if pod["metadata"].get("deletionTimestamp"):
            return
        pod = copy.deepcopy(pod)
        pod["metadata"]["deletionTimestamp"] = now_rfc3339()
        self.store.update("pods", namespace, pod)
        uid = pod["metadata"]["uid"]
        grace = min(3.0, float(pod["spec"].get("terminationGracePeriodSeconds", 30)))

        def finish() -> None:
            kill_marked(f"{POD_MARKER}={uid}", grace)
            runtime = self.runtimes.get(uid)
            if runtime is not None and runtime.process is not None:
                try:
                    runtime.process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
                with runtime.cond:
                    runtime.cond.wait_for(lambda: runtime.done, timeout=5)
            self.store.remove("pods", namespace, pod["metadata"]["name"])
            self._wake.set()

        threading.Thread(target=finish, name=f"fake-delete-{pod['metadata']['name']}", daemon=True).start()

    # -- controllers ----------------------------------------------------------------------------
    def _control(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(0.05)
            self._wake.clear()
            with self.store.lock:
                for job in [copy.deepcopy(j) for j in self.store.items("jobs.batch")]:
                    self._kueue(job)
                    self._reconcile(job)
                for obj in self.store.items("pytorchjobs.kubeflow.org"):
                    self._operator(obj)
                for obj in self.store.items("jobsets.jobset.x-k8s.io"):
                    self._jobset_controller(obj)
                for resource in ("pytorchjobs.kubeflow.org", "jobsets.jobset.x-k8s.io"):
                    for obj in [copy.deepcopy(o) for o in self.store.items(resource)]:
                        self._owner_deadline(resource, obj)
                self.trainer.reconcile()

    def _kueue(self, job: dict[str, Any]) -> None:
        """Kueue's job framework, as far as the fake plays it: a queued Job gets its Workload (pending)."""
        meta = job["metadata"]
        queue = (meta.get("labels") or {}).get("kueue.x-k8s.io/queue-name")
        if not queue or "workloads.kueue.x-k8s.io" not in self.store.crds or meta.get("deletionTimestamp"):
            return
        ns, uid = meta["namespace"], meta["uid"]
        if any(w["metadata"]["labels"].get("kueue.x-k8s.io/job-uid") == uid
               for w in self.store.items("workloads.kueue.x-k8s.io", ns)):
            return
        digest = hashlib.sha1(f"{meta['name']}{uid}Jobbatch".encode()).hexdigest()[:5]
        workload = {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
            "metadata": {"name": f"job-{meta['name']}-{digest}", "labels": {"kueue.x-k8s.io/job-uid": uid},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": uid,
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"queueName": queue, "podSets": [{"name": "main", "count": int(job["spec"].get("parallelism", 1)),
                                                      "template": job["spec"]["template"]}]},
            "status": {"conditions": []},
        }
        if self.kueue_pending is not None:
            _condition(workload, "QuotaReserved", "False", "Pending", self.kueue_pending)
        self.store.create("workloads.kueue.x-k8s.io", ns, workload)

    def _operator(self, obj: dict[str, Any]) -> None:
        """The training operator, as far as the fake plays it: it tries to create the replicas' pods and, when an
        admission rejects them, records FailedCreatePod on the PyTorchJob (it runs no pods otherwise)."""
        if self.pod_admission and not obj["metadata"].get("deletionTimestamp"):
            name, ns = obj["metadata"]["name"], obj["metadata"]["namespace"]
            self._event(ns, obj, "FailedCreatePod",
                        f'Error creating: pods "{name}-master-0" is forbidden: {self.pod_admission}')

    def _jobset_controller(self, obj: dict[str, Any]) -> None:
        """The JobSet controller and the Job controller under it, as far as the fake plays them: when an admission
        rejects pods, the Job controller records FailedCreate on the JobSet's first child Job (``JOBSET-node-0``, a
        name the mirror reads as the JobSet's); no Job or pod is made otherwise."""
        if self.pod_admission and not obj["metadata"].get("deletionTimestamp"):
            name, ns = obj["metadata"]["name"], obj["metadata"]["namespace"]
            child = {"kind": "Job", "metadata": {"name": f"{name}-node-0", "uid": f"{obj['metadata']['uid']}-node-0"}}
            self._event(ns, child, "FailedCreate",
                        f'Error creating: pods "{name}-node-0-0-" is forbidden: {self.pod_admission}')

    def _owner_deadline(self, resource: str, obj: dict[str, Any]) -> None:
        """A PyTorchJob or JobSet past its deadline fails with the condition its controller writes.

        Training operator (kubeflow/training-operator release-1.9, pkg/controller.v1/common/job.go, ReconcileJobs):
        type Failed, reason ``PyTorchJobFailed`` (``NewReason(kind, JobFailedReason)``), message "Job NAME has failed
        because it was active longer than specified deadline". JobSet (kubernetes-sigs/jobset, pkg/controllers/
        failure_policy.go): its Job fails with ``DeadlineExceeded``; a failure-policy rule FailJobSet on that reason
        gives reason ``FailJobSetFailurePolicyAction`` and message "applying FailJobSet failure policy action (first
        failed job: JOB)"; without one, the default RestartJobSet at maxRestarts gives ``ReachedMaxRestarts``, "jobset
        failed due to reaching max number of restarts (first failed job: JOB)".
        """
        meta, spec = obj["metadata"], obj.get("spec") or {}
        if meta.get("deletionTimestamp") or self._finished(obj, ("Succeeded", "Completed", "Failed")):
            return
        if resource.startswith("pytorchjobs"):
            suspended, deadline = bool((spec.get("runPolicy") or {}).get("suspend")), \
                (spec.get("runPolicy") or {}).get("activeDeadlineSeconds")
        else:
            job = spec["replicatedJobs"][0]
            suspended, deadline = bool(spec.get("suspend")), job["template"]["spec"].get("activeDeadlineSeconds")
        times = self.job_times.setdefault(meta["uid"], {})
        if suspended or deadline is None:
            return
        started = times.setdefault("started", time.time())
        if time.time() - started <= deadline:
            return
        name = meta["name"]
        if resource.startswith("pytorchjobs"):
            reason, message = "PyTorchJobFailed", f"Job {name} has failed because it was active longer than specified deadline"
        else:
            first = f"{name}-{spec['replicatedJobs'][0]['name']}-0"
            rules = (spec.get("failurePolicy") or {}).get("rules") or []
            matched = next((r for r in rules if "DeadlineExceeded" in (r.get("onJobFailureReasons") or
                                                                        ["DeadlineExceeded"])), None)  # [] matches all
            if matched is not None and matched.get("action") == "FailJobSet":
                reason, message = "FailJobSetFailurePolicyAction", \
                    f"applying FailJobSet failure policy action (first failed job: {first})"
            else:
                reason, message = "ReachedMaxRestarts", \
                    f"jobset failed due to reaching max number of restarts (first failed job: {first})"
        self._set_condition(obj, "Failed", reason, message)
        self.store.update(resource, meta["namespace"], obj)

    def _pods_of(self, namespace: str, job: dict[str, Any]) -> list[dict[str, Any]]:
        uid = job["metadata"]["uid"]
        return [p for p in self.store.items("pods", namespace)
                if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])]

    def _set_condition(self, job: dict[str, Any], kind: str, reason: str, message: str) -> None:
        conditions = job.setdefault("status", {}).setdefault("conditions", [])
        conditions.append({"type": kind, "status": "True", "reason": reason, "message": message,
                           "lastTransitionTime": now_rfc3339()})

    def _finished(self, job: dict[str, Any], types: tuple[str, ...] = ("Complete", "Failed")) -> bool:
        return any(c["type"] in types for c in (job.get("status") or {}).get("conditions", []))

    def _reconcile(self, job: dict[str, Any]) -> None:
        ns, name, spec = job["metadata"]["namespace"], job["metadata"]["name"], job["spec"]
        uid = job["metadata"]["uid"]
        status = job.setdefault("status", {})
        pods = self._pods_of(ns, job)
        if job["metadata"].get("deletionTimestamp"):
            if not pods:
                self._remove_owner("jobs.batch", ns, name, orphan=False)
            return
        times = self.job_times.setdefault(uid, {})
        if self._finished(job):
            ttl = spec.get("ttlSecondsAfterFinished")
            if ttl is not None and time.time() - times.get("finished", time.time()) >= ttl:
                self.delete("jobs.batch", ns, name, "Background")
            return
        if spec.get("suspend"):
            for pod in pods:  # suspending a Job that runs (a Kueue eviction) ends its pods
                if pod["status"].get("phase") not in ("Succeeded", "Failed"):
                    self._delete_pod(ns, pod)
            return
        if "startTime" not in status:
            status["startTime"] = now_rfc3339()
            times["started"] = time.time()
            self.store.update("jobs.batch", ns, job)
        verdict: tuple[str, str] | None = None
        succeeded: set[int] = set()
        busy: set[int] = set()
        for pod in pods:
            index = int(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
            phase = pod["status"].get("phase")
            if phase == "Succeeded":
                succeeded.add(index)
            elif phase != "Failed":
                busy.add(index)
            elif pod["metadata"]["uid"] not in self.counted:
                self.counted.add(pod["metadata"]["uid"])
                action = self._failure_action(spec, pod)
                if action == "FailJob":
                    code = pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"]
                    verdict = ("PodFailurePolicy", f"Container trainer for pod {ns}/{pod['metadata']['name']} "
                               f"failed with exit code {code} matching FailJob rule at index 0")
                elif action != "Ignore":
                    status["failed"] = int(status.get("failed", 0)) + 1
                    if status["failed"] > int(spec.get("backoffLimit", 6)):
                        verdict = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
        deadline = spec.get("activeDeadlineSeconds")
        if verdict is None and deadline is not None and time.time() - times["started"] > deadline:
            verdict = ("DeadlineExceeded", "Job was active longer than specified deadline")
        if verdict is not None:
            self._set_condition(job, "FailureTarget", *verdict)
            self._set_condition(job, "Failed", *verdict)
            times["finished"] = time.time()
            self.store.update("jobs.batch", ns, job)
            for pod in pods:
                if pod["status"].get("phase") not in ("Succeeded", "Failed"):
                    self._delete_pod(ns, pod)
            return
        completions = int(spec.get("completions", 1))
        if len(succeeded) >= completions:
            message = "Reached expected number of succeeded pods"
            self._set_condition(job, "SuccessCriteriaMet", "CompletionsReached", message)
            self._set_condition(job, "Complete", "CompletionsReached", message)
            status["succeeded"] = len(succeeded)
            times["finished"] = time.time()
            self.store.update("jobs.batch", ns, job)
            return
        for index in range(completions):
            if index not in busy and index not in succeeded:
                self._create_pod(job, index)

    def _failure_action(self, spec: dict[str, Any], pod: dict[str, Any]) -> str | None:
        for rule in (spec.get("podFailurePolicy") or {}).get("rules", []):
            codes = rule.get("onExitCodes")
            if codes:
                for state in pod["status"].get("containerStatuses") or []:
                    code = (state.get("state") or {}).get("terminated", {}).get("exitCode")
                    if code is None or (codes.get("containerName") not in (None, state["name"])):
                        continue
                    inside = code in codes.get("values", [])
                    if (codes["operator"] == "In") == inside:
                        return str(rule["action"])
            for pattern in rule.get("onPodConditions") or []:
                for condition in pod["status"].get("conditions") or []:
                    if condition.get("type") == pattern.get("type") and str(condition.get("status")) == pattern.get("status", "True"):
                        return str(rule["action"])
        return None

    def _create_pod(self, job: dict[str, Any], index: int) -> None:
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        if self.pod_quota or self.pod_admission:
            self._event(ns, job, "FailedCreate",
                        f'Error creating: pods "{name}-{index}-" is forbidden: {self.pod_quota or self.pod_admission}')
            return
        template = copy.deepcopy(job["spec"]["template"])
        meta = template.get("metadata") or {}
        labels = dict(meta.get("labels") or {})
        labels.update({"batch.kubernetes.io/job-name": name, "batch.kubernetes.io/job-completion-index": str(index)})
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "generateName": f"{name}-{index}-", "labels": labels,
                "annotations": {**(meta.get("annotations") or {}), "batch.kubernetes.io/job-completion-index": str(index)},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                     "uid": job["metadata"]["uid"], "controller": True}],
            },
            "spec": {**template["spec"], "hostname": f"{name}-{index}"},
            "status": {"phase": "Pending", "conditions": [],
                       "containerStatuses": [{"name": c["name"], "ready": False, "restartCount": 0,
                                              "state": {"waiting": {"reason": "ContainerCreating"}}}
                                             for c in template["spec"]["containers"]]},
        }
        created = self.store.create("pods", ns, pod)
        threading.Thread(target=self._kubelet, args=(ns, created["metadata"]["name"]), daemon=True,
                         name=f"fake-kubelet-{created['metadata']['name']}").start()

    def _event(self, ns: str, obj: dict[str, Any], reason: str, message: str) -> None:
        """Record a Warning Event about ``obj`` (once per reason and message)."""
        for event in self.store.items("events", ns):
            if event["reason"] == reason and event["message"] == message:
                return
        self.store.create("events", ns, {
            "apiVersion": "v1", "kind": "Event", "metadata": {"generateName": obj["metadata"]["name"] + "."},
            "type": "Warning", "reason": reason, "message": message, "lastTimestamp": now_rfc3339(),
            "involvedObject": {"kind": obj["kind"], "name": obj["metadata"]["name"], "namespace": ns,
                               "uid": obj["metadata"]["uid"]},
        })

    # -- kubelet --------------------------------------------------------------------------------
    def _pod_update(self, ns: str, name: str, change: Any) -> dict[str, Any] | None:
        with self.store.lock:
            pod = self.store.find("pods", ns, name)
            if pod is None:
                return None
            pod = copy.deepcopy(pod)
            change(pod)
            self.store.update("pods", ns, pod)
            return pod

    def _waiting(self, pod: dict[str, Any], reason: str, message: str = "") -> None:
        pod["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": reason, "message": message}}

    def _kubelet(self, ns: str, name: str) -> None:
        while not self._stop.is_set():
            pod = self.store.find("pods", ns, name)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                return
            if self.unschedulable:
                if not pod["status"].get("conditions"):
                    self._pod_update(ns, name, functools.partial(_unschedulable, message=self.unschedulable))
                time.sleep(0.1)
                continue
            missing = [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"].get("volumes") or []
                        if "persistentVolumeClaim" in v and self.store.find(
                            "persistentvolumeclaims", ns, v["persistentVolumeClaim"]["claimName"]) is None]
            if missing:  # the scheduler's VolumeBinding plugin: unschedulable until the claim exists
                if not pod["status"].get("conditions"):
                    self._pod_update(ns, name, functools.partial(_unschedulable, message=(
                        f'0/1 nodes are available: persistentvolumeclaim "{missing[0]}" not found. preemption: 0/1 '
                        "nodes are available: 1 Preemption is not helpful for scheduling.")))
                time.sleep(0.1)
                continue
            image = str(pod["spec"]["containers"][0].get("image", ""))
            if image.startswith("missing/"):
                self._pod_update(ns, name, functools.partial(
                    self._waiting, reason="ErrImagePull", message=f"pull access denied for {image}"))
                time.sleep(0.3)
                self._pod_update(ns, name, functools.partial(
                    self._waiting, reason="ImagePullBackOff", message=f'Back-off pulling image "{image}"'))
                return
            prepared = self._prepare(ns, pod)
            if isinstance(prepared, str):
                self._pod_update(ns, name, lambda p, why=prepared: self._waiting(p, "CreateContainerConfigError", why))
                time.sleep(0.2)
                continue
            if prepared is None:
                time.sleep(0.1)  # the ConfigMap is not there yet (created right after the Job)
                continue
            self._run(ns, pod, *prepared)
            return

    def _prepare(self, ns: str, pod: dict[str, Any]) -> tuple[list[str], dict[str, str], str] | str | None:
        meta, spec = pod["metadata"], pod["spec"]
        container = spec["containers"][0]
        root = self.workdir / "pods" / meta["name"]
        mounts: dict[str, str] = {}
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        for mount in container.get("volumeMounts") or []:
            if mount["mountPath"] == "/dev/shm":
                continue  # the host's /dev/shm is fine for a local process
            volume = volumes[mount["name"]]
            target = root / "volumes" / mount["name"]
            if "persistentVolumeClaim" in volume:
                target = self.claim_dir(ns, volume["persistentVolumeClaim"]["claimName"])
            elif "configMap" in volume or "projected" in volume:
                # a projected volume: every ConfigMap source laid out in the one directory
                sources = [s["configMap"] for s in volume["projected"]["sources"]] if "projected" in volume \
                    else [volume["configMap"]]
                files: dict[str, bytes] = {}
                for source in sources:
                    configmap = self.store.find("configmaps", ns, source["name"])
                    if configmap is None:
                        return None
                    data = {k: v.encode() for k, v in (configmap.get("data") or {}).items()}
                    data.update({k: base64.b64decode(v) for k, v in (configmap.get("binaryData") or {}).items()})
                    items = source.get("items") or [{"key": k, "path": k} for k in data]
                    if any(item["key"] not in data for item in items):
                        return None  # the kubelet retries the mount (FailedMount) until the keys exist
                    files.update({item["path"]: data[item["key"]] for item in items})
                target.mkdir(parents=True, exist_ok=True)
                for rel, content in files.items():
                    path = target / rel
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(content)
            else:
                target.mkdir(parents=True, exist_ok=True)
            mounts[mount["mountPath"]] = str(target)
        env: dict[str, str] = {}
        annotations = meta.get("annotations") or {}
        for item in container.get("env") or []:
            if "value" in item:
                env[item["name"]] = expand(item["value"], env)
                continue
            source = item.get("valueFrom") or {}
            if "fieldRef" in source:
                path = source["fieldRef"]["fieldPath"]
                found = re.match(r"metadata\.(annotations|labels)\['(.+)'\]", path)
                if found:
                    env[item["name"]] = str((meta.get(found.group(1)) or {}).get(found.group(2), ""))
                else:
                    env[item["name"]] = str(meta.get(path.split(".")[-1], ""))
            elif "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                secret = self._secret(ns, ref["name"])
                if secret is None or ref["key"] not in secret:
                    if ref.get("optional"):
                        continue  # an optional reference that does not resolve leaves the variable unset
                    if secret is None:
                        return f'secret "{ref["name"]}" not found'
                    return f'couldn\'t find key {ref["key"]} in Secret {ns}/{ref["name"]}'
                env[item["name"]] = secret[ref["key"]]
        if "batch.kubernetes.io/job-completion-index" in annotations:
            env["JOB_COMPLETION_INDEX"] = annotations["batch.kubernetes.io/job-completion-index"]
        env["HOSTNAME"] = spec.get("hostname", meta["name"])
        argv = [expand(a, env) for a in (container.get("command") or []) + (container.get("args") or [])]
        # mount paths -> the volumes' local directories; pod DNS names under a headless Service -> 127.0.0.1
        # (the pod's own subdomain too: on a cluster the name resolves once the Service exists, and torch retries).
        # One pass, so a replaced path is never rewritten again (the fake's volumes live under /tmp too).
        label = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
        hosts = [rf"{label}\.{re.escape(svc)}(?:\.{re.escape(ns)}(?:\.svc(?:\.cluster\.local)?)?)?"
                 for svc in sorted(set(self._headless_services(ns)) | {spec.get("subdomain") or ""} - {""})]
        paths = [re.escape(m) for m in sorted(mounts, key=len, reverse=True)]
        # The image is this host's Python installation: paths inside it (a venv under /tmp, say) belong to the
        # image, not to a volume mounted over /tmp, so they are matched first and kept as they are.
        image = [re.escape(p) for p in sorted(_image_roots(), key=len, reverse=True)]
        parts = ([f"(?P<image>(?:{'|'.join(image)})(?:/[^\\s:]*)?)"] if paths else []) \
            + ([f"(?P<path>{'|'.join(paths)})"] if paths else []) + ([f"(?P<host>{'|'.join(hosts)})"] if hosts else [])
        pattern = re.compile(rf"(?<![\w/.-])(?:{'|'.join(parts)})(?![\w-])") if parts else None

        def replace(match: re.Match[str]) -> str:
            found = match.groupdict()
            if found.get("image"):
                return match.group(0)
            return mounts[match.group("path")] if found.get("path") else "127.0.0.1"

        def rewrite(text: str) -> str:
            return text if pattern is None else pattern.sub(replace, text)

        argv = [rewrite(a) for a in argv]
        env = {k: rewrite(v) for k, v in env.items()}
        cwd = rewrite(container.get("workingDir") or str(root))
        return argv, env, cwd

    def _secret(self, ns: str, name: str) -> dict[str, str] | None:
        """A Secret's decoded data: the object created through the API, else one preset in ``secrets``."""
        obj = self.store.find("secrets", ns, name)
        if obj is None:
            return self.secrets.get((ns, name))
        data = {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in (obj.get("data") or {}).items()}
        data.update(obj.get("stringData") or {})
        return data

    def _headless_services(self, ns: str) -> list[str]:
        return [svc["metadata"]["name"] for svc in self.store.items("services", ns)
                if (svc.get("spec") or {}).get("clusterIP") == "None"]

    def _run(self, ns: str, pod: dict[str, Any], argv: list[str], env: dict[str, str], cwd: str) -> None:
        uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
        runtime = self.runtimes[uid] = PodRuntime(uid, self.log_keep_lines)
        full_env = {**self.base_env, **env, POD_MARKER: uid}
        lacks = self.image_lacks.get(str(pod["spec"]["containers"][0].get("image", "")))
        if lacks:  # the "image" is this host's Python: hide the packages the image would not have
            full_env["PYTHONPATH"] = os.pathsep.join([str(_hider()), *filter(None, [full_env.get("PYTHONPATH")])])
            full_env["FAKE_IMAGE_LACKS"] = ",".join(sorted(lacks))
        Path(cwd).mkdir(parents=True, exist_ok=True)
        try:
            runtime.process = subprocess.Popen(argv, env=full_env, cwd=cwd, stdin=subprocess.DEVNULL,
                                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as error:
            # restartPolicy Never: a container that cannot start fails the pod (StartError, exit 128), as a kubelet
            # does; it never waits forever. The container was created, so its log exists and is empty (a kubelet
            # serves it, 200 with no lines: `kubectl logs` shows nothing), rather than "waiting to start" forever.
            with runtime.cond:
                runtime.started = runtime.done = True
                runtime.cond.notify_all()
            self._pod_update(ns, name, functools.partial(_start_error, message=str(error)))
            self._wake.set()
            return
        started = now_rfc3339()
        runtime.started = True

        def running(p: dict[str, Any]) -> None:
            p["status"].update(phase="Running", podIP="127.0.0.1", hostIP="127.0.0.1", startTime=started)
            p["status"]["containerStatuses"][0].update(ready=True, state={"running": {"startedAt": started}})
        self._pod_update(ns, name, running)
        runtime.pump()
        code = runtime.exit_code if runtime.exit_code is not None else 1
        code = 128 - code if code < 0 else code  # a signal shows as 128+n, as in a container

        def terminated(p: dict[str, Any]) -> None:
            p["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
            p["status"]["containerStatuses"][0].update(ready=False, state={"terminated": {
                "exitCode": code, "reason": "Completed" if code == 0 else "Error",
                "startedAt": started, "finishedAt": now_rfc3339()}})
        self._pod_update(ns, name, terminated)
        self._wake.set()



_HIDER = """import os, sys
class _Lacks:
    names = set(os.environ.get("FAKE_IMAGE_LACKS", "").split(","))
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _Lacks())
"""


@functools.cache
def _hider() -> Path:
    """A directory whose sitecustomize.py makes the packages in FAKE_IMAGE_LACKS unimportable, as in an image
    that does not have them (the pod's Python is this host's)."""
    import atexit
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="fake-image-"))
    atexit.register(shutil.rmtree, root, True)  # one per test process; removed when it ends (ignore_errors)
    (root / "sitecustomize.py").write_text(_HIDER)
    return root


def _image_roots() -> set[str]:
    """Where the fake's "image" (this host's Python and its packages) lives."""
    return {p for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
            if p and p != "/"}


def _start_error(pod: dict[str, Any], message: str) -> None:
    now = now_rfc3339()
    pod["status"]["phase"] = "Failed"
    pod["status"]["containerStatuses"][0].update(ready=False, state={"terminated": {
        "exitCode": 128, "reason": "StartError", "message": message, "startedAt": now, "finishedAt": now}})


def _unschedulable(pod: dict[str, Any], message: str) -> None:
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                    "message": message}]


def raise_not_found(message: str) -> None:
    raise ApiError(404, "NotFound", message)


def _is_true(obj: dict[str, Any], kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions") or [])


def _condition(obj: dict[str, Any], kind: str, status: str, reason: str, message: str) -> None:
    """Set condition ``kind`` (one per type, as a Kueue Workload keeps them)."""
    conditions = obj.setdefault("status", {}).setdefault("conditions", [])
    conditions[:] = [c for c in conditions if c["type"] != kind]
    conditions.append({"type": kind, "status": status, "reason": reason, "message": message,
                       "lastTransitionTime": now_rfc3339()})
