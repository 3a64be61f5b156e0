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

Kueue (fake_kueue.py), once :meth:`FakeCluster.add_local_queue` installed it: a Workload for each queued (labelled, suspended) Job, as
Kueue's job framework makes it (named ``job-<name>-<hash>``, labelled ``kueue.x-k8s.io/job-uid``, owned by the Job),
pending with ``QuotaReserved`` False and ``kueue_pending`` as the message (no condition while it is None: not yet
tried); :meth:`~FakeCluster.admit` reserves quota, admits and unsuspends the Job; :meth:`~FakeCluster.evict` marks it
Evicted, suspends the Job again (its pods go) and puts it back in line. :meth:`~FakeCluster.install_visibility` serves
the on-demand visibility API (pending positions; ``kueue_ahead`` Workloads of others in line first).

Kubelet (fake_kubelet.py): each pod's command runs as a local process with the pod's environment (``value``,
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

import copy
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fake_apiserver import FakeApiServer, Store, now_rfc3339
from fake_kubelet import POD_MARKER, FakeKubelet, PodRuntime, kill_marked
from fake_kueue import FakeKueue
from fake_trainer import RESOURCE as TRAINJOBS
from fake_trainer import FakeTrainer

NAMESPACE = "nbtrain-test"  # the namespace of the test kubeconfig's context


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
        self.kueue = FakeKueue(self)  # Kueue (queued Jobs' Workloads, admission, eviction): fake_kueue.py
        self.kubelet = FakeKubelet(self)  # runs each pod as local processes: fake_kubelet.py
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
        """What Kueue does on admission (fake_kueue.py)."""
        self.kueue.admit(namespace, name)

    def evict(self, namespace: str, name: str, reason: str, message: str, *, pending: str | None = None) -> None:
        """What Kueue does when it evicts the Job's Workload (fake_kueue.py)."""
        self.kueue.evict(namespace, name, reason, message, pending=pending)

    def workload_of(self, namespace: str, job: str) -> dict[str, Any] | None:
        """A copy of the Kueue Workload of Job ``job`` (None: none yet)."""
        return self.kueue.workload_of(namespace, job)

    def install_visibility(self) -> None:
        """Serve Kueue's on-demand visibility API (localqueues/pendingworkloads)."""
        self.kueue.install_visibility()

    def pending_workloads(self, namespace: str, queue: str) -> dict[str, Any]:
        """The visibility API's PendingWorkloadsSummary of LocalQueue ``queue`` (fake_kueue.py)."""
        return self.kueue.pending_workloads(namespace, queue)

    def add_local_queue(self, namespace: str, name: str) -> None:
        """Install Kueue (if not yet) and create the LocalQueue ``name`` (fake_kueue.py)."""
        self.kueue.add_local_queue(namespace, name)

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
                    self.kueue.reconcile(job)
                    self._reconcile(job)
                for obj in self.store.items("pytorchjobs.kubeflow.org"):
                    self._operator(obj)
                for obj in self.store.items("jobsets.jobset.x-k8s.io"):
                    self._jobset_controller(obj)
                for resource in ("pytorchjobs.kubeflow.org", "jobsets.jobset.x-k8s.io"):
                    for obj in [copy.deepcopy(o) for o in self.store.items(resource)]:
                        self._owner_deadline(resource, obj)
                self.trainer.reconcile()

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
        threading.Thread(target=self.kubelet.run_pod, args=(ns, created["metadata"]["name"]), daemon=True,
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
