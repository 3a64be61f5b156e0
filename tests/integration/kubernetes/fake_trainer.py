"""Kubeflow Trainer v2 behind the fake API server: its TrainJob webhook and controller, with JobSet's part, as far as
nbtrain's runs need them (kubeflow/trainer at the commit tests/data/crds/README.md names).

Webhook (:meth:`FakeTrainer.validate`, on create): the runtime a TrainJob names must exist ("specified
clusterTrainingRuntime must be created before the TrainJob is created"); ``spec.trainer.env`` must not set the torch
plugin's ``PET_*``; a runtime patch's manager is a domain-prefixed path, names only replicated Jobs and containers the
runtime has, and sets no env on the ``node`` container.

Controller (:meth:`FakeTrainer.reconcile`): for each TrainJob, not suspended and not finished, the runtime's JobSet
template with the TrainJob's ``runtimePatches`` merged in (strategic merge on the fields nbtrain patches: maps merged,
lists of named items merged by name, volume mounts by mountPath, other lists replaced), the trainer fields applied to the
``node`` container of the replicated Job labelled ``trainer.kubeflow.org/trainjob-ancestor-step: trainer`` (image,
command, args, env upserted, resources merged) and the torch plugin's env (``PET_NNODES``, ``PET_NPROC_PER_NODE``,
``PET_NODE_RANK`` from the completion index, ``PET_MASTER_ADDR`` ``<name>-node-0-0.<name>``, ``PET_MASTER_PORT``
29500). JobSet's part: one Indexed Job ``<name>-node-0`` (completions = parallelism = numNodes) whose pods have the
subdomain ``<name>`` and JobSet's labels; the fake Job controller runs it (hostnames ``<name>-node-0-<i>``). Endings:
the Job's Complete/Failed become the TrainJob's Complete (``AllJobsCompleted``, "jobset completed successfully") or
Failed (without a JobSet failure policy ``FailedJobs``, "jobset failed due to one or more job failures (first failed
job: JOB)"; with one, as nbtrain-torch's ``maxRestarts: 0``, ``ReachedMaxRestarts``), as JobSet says them and Trainer
copies them; past ``activeDeadlineSeconds`` (from the time it was first unsuspended) the TrainJob fails
with ``DeadlineExceeded``, "TrainJob exceeded its active deadline", and its Job is deleted. A Job whose TrainJob is
gone is deleted (garbage collection through the JobSet). ``resources_fail`` plays a JobSet Trainer cannot apply: a
Warning Event ``TrainJobResourcesCreationFailed`` on the TrainJob, and no pods. Runtimes live here, not in the API:
:meth:`add_runtime`.
"""

from __future__ import annotations

import copy
import re
import time
from typing import Any

from fake_apiserver import ApiError, now_rfc3339

RESOURCE = "trainjobs.trainer.kubeflow.org"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
PET = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")
PORT = 29500


def merge(base: Any, patch: Any, key: str = "") -> Any:
    """A strategic merge, as far as the runtime patches nbtrain sends need it."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for name, value in patch.items():
            out[name] = merge(base[name], value, name) if name in base else copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(patch, list):
        field = {"volumeMounts": "mountPath"}.get(key, "name")
        if key in ("tolerations", "args", "command") or not all(isinstance(x, dict) and field in x for x in base + patch):
            return copy.deepcopy(patch)
        out = [copy.deepcopy(x) for x in base]
        for item in patch:
            at = next((i for i, x in enumerate(out) if x[field] == item[field]), None)
            if at is None:
                out.append(copy.deepcopy(item))
            else:
                out[at] = merge(out[at], item)
        return out
    return copy.deepcopy(patch)


def _upsert_env(env: list[dict[str, Any]], items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = [dict(e) for e in env]
    for item in items:
        at = next((i for i, e in enumerate(out) if e["name"] == item["name"]), None)
        if at is None:
            out.append(copy.deepcopy(item))
        else:
            out[at] = copy.deepcopy(item)
    return out


class FakeTrainer:
    """Trainer v2's webhook and controller for a :class:`~fake_cluster.FakeCluster` (see the module docstring)."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.runtimes: dict[tuple[str, str, str], dict[str, Any]] = {}  # (kind, namespace or "", name) -> object
        self.started: dict[str, float] = {}  # TrainJob uid -> when it was first seen unsuspended
        self.resources_fail: str | None = None  # when set, applying a TrainJob's JobSet fails with this error

    def add_runtime(self, runtime: dict[str, Any], namespace: str | None = None) -> None:
        """Install a (Cluster)TrainingRuntime (its kind says which; a TrainingRuntime lives in ``namespace``) and the
        TrainJob CRD."""
        self.store.crds.add(RESOURCE)
        scope = namespace if runtime["kind"] == "TrainingRuntime" else ""
        self.runtimes[(runtime["kind"], scope or "", runtime["metadata"]["name"])] = copy.deepcopy(runtime)

    # -- webhook --------------------------------------------------------------------------------
    def validate(self, namespace: str, job: dict[str, Any]) -> None:
        """Raise the webhook's refusal (422) for a TrainJob Trainer would not admit."""
        spec = job.get("spec") or {}
        ref = spec.get("runtimeRef") or {}
        runtime = self._runtime(namespace, ref)
        if runtime is None:
            kind = ref.get("kind", "ClusterTrainingRuntime")
            lower = kind[0].lower() + kind[1:]
            raise self._invalid(job, "spec.runtimeRef", f'{kind.lower()}s.trainer.kubeflow.org "{ref.get("name")}" not '
                                f"found: specified {lower} must be created before the TrainJob is created")
        reserved = sorted({e["name"] for e in (spec.get("trainer") or {}).get("env") or []} & set(PET))
        if reserved:
            raise self._invalid(job, "spec.trainer.env", f"must not have reserved envs, invalid envs configured: {reserved}")
        jobs = {r["name"]: {c["name"] for c in r["template"]["spec"]["template"]["spec"]["containers"]}
                for r in runtime["spec"]["template"]["spec"]["replicatedJobs"]}
        for patch in spec.get("runtimePatches") or []:
            if not re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[-A-Za-z0-9_./]+$", patch.get("manager", "")):
                raise self._invalid(job, "spec.runtimePatches.manager", "must be a domain-prefixed path")
            template = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}
            for rjob in template.get("replicatedJobs") or []:
                if rjob["name"] not in jobs:
                    raise self._invalid(job, "spec.runtimePatches", "must not have replicated job that doesn't exist "
                                        "in the runtime job template")
                pod = (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
                for container in pod.get("containers") or []:
                    if container["name"] not in jobs[rjob["name"]]:
                        raise self._invalid(job, "spec.runtimePatches", "must not have container that doesn't exist "
                                            f"in the runtime job {rjob['name']}")
                    if container.get("env") and container["name"] == "node":
                        raise self._invalid(job, "spec.runtimePatches", "must not have envs for the "
                                            "dataset-initializer, model-initializer, node containers")

    def _invalid(self, job: dict[str, Any], path: str, message: str) -> ApiError:
        name = (job.get("metadata") or {}).get("name")
        return ApiError(422, "Invalid", f'admission webhook "validate.trainjob.trainer.kubeflow.org" denied the '
                        f'request: TrainJob.trainer.kubeflow.org "{name}" is invalid: {path}: Invalid value: {message}')

    def _runtime(self, namespace: str, ref: dict[str, Any]) -> dict[str, Any] | None:
        kind = ref.get("kind", "ClusterTrainingRuntime")
        return self.runtimes.get((kind, namespace if kind == "TrainingRuntime" else "", str(ref.get("name"))))

    # -- controller -----------------------------------------------------------------------------
    def reconcile(self) -> None:
        """One pass over every TrainJob, and the garbage collection of Jobs whose TrainJob is gone."""
        alive = {o["metadata"]["uid"] for o in self.store.items(RESOURCE)}
        for job in list(self.store.items("jobs.batch")):
            refs = job["metadata"].get("ownerReferences") or []
            if any(r.get("kind") == "TrainJob" and r.get("uid") not in alive for r in refs):
                self.cluster.delete("jobs.batch", job["metadata"]["namespace"], job["metadata"]["name"], "Background")
        for train in [copy.deepcopy(o) for o in self.store.items(RESOURCE)]:
            self._reconcile(train)

    def _reconcile(self, train: dict[str, Any]) -> None:
        meta, spec = train["metadata"], train.get("spec") or {}
        ns, name = meta["namespace"], meta["name"]
        conditions = (train.get("status") or {}).get("conditions") or []
        if meta.get("deletionTimestamp") or any(c["type"] in ("Complete", "Failed") for c in conditions):
            return
        if spec.get("suspend"):
            self._condition(train, "Suspended", "True", "Suspended", "TrainJob is suspended")
            return
        if any(c["type"] == "Suspended" and c["status"] == "True" for c in conditions):
            self._condition(train, "Suspended", "False", "Resumed", "TrainJob is resumed")
        started = self.started.setdefault(meta["uid"], time.time())
        child = self.store.find("jobs.batch", ns, f"{name}-node-0")
        deadline = spec.get("activeDeadlineSeconds")
        if deadline is not None and time.time() - started > deadline:
            self._condition(train, "Failed", "True", "DeadlineExceeded", "TrainJob exceeded its active deadline")
            if child is not None:
                self.cluster.delete("jobs.batch", ns, child["metadata"]["name"], "Background")
            return
        if child is None and self.resources_fail:  # Trainer records it and retries (TrainJobReconciler.Reconcile)
            self.cluster._event(ns, train, "TrainJobResourcesCreationFailed",
                                f"TrainJob resources reconciliation failed: {self.resources_fail}")
            return
        if child is None:
            self.store.create("jobs.batch", ns, self._job(train))
            return
        ended = {c["type"] for c in (child.get("status") or {}).get("conditions") or []}
        first = f"(first failed job: {child['metadata']['name']})"
        runtime = self._runtime(ns, spec["runtimeRef"]) or {}
        if "Failed" in ended and ((runtime.get("spec") or {}).get("template") or {}).get("spec", {}).get("failurePolicy"):
            # a failure policy without a rule that matches: RestartJobSet, and at maxRestarts the JobSet fails
            self._condition(train, "Failed", "True", "ReachedMaxRestarts",
                            f"jobset failed due to reaching max number of restarts {first}")
        elif "Failed" in ended:
            self._condition(train, "Failed", "True", "FailedJobs", f"jobset failed due to one or more job failures {first}")
        elif "Complete" in ended:
            self._condition(train, "Complete", "True", "AllJobsCompleted", "jobset completed successfully")

    def _condition(self, train: dict[str, Any], kind: str, status: str, reason: str, message: str) -> None:
        conditions = train.setdefault("status", {}).setdefault("conditions", [])
        if any(c["type"] == kind and c["status"] == status and c["reason"] == reason for c in conditions):
            return
        conditions[:] = [c for c in conditions if c["type"] != kind]
        conditions.append({"type": kind, "status": status, "reason": reason, "message": message,
                           "lastTransitionTime": now_rfc3339()})
        self.store.update(RESOURCE, train["metadata"]["namespace"], train)

    def _job(self, train: dict[str, Any]) -> dict[str, Any]:
        """The child Job of the JobSet Trainer would make for ``train``."""
        meta, spec = train["metadata"], train["spec"]
        name = meta["name"]
        runtime = self._runtime(meta["namespace"], spec["runtimeRef"])
        assert runtime is not None  # the webhook admitted it
        jobset = copy.deepcopy(runtime["spec"]["template"])
        labels = dict((jobset.get("metadata") or {}).get("labels") or {})
        for patch in spec.get("runtimePatches") or []:
            template = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
            labels.update((template.get("metadata") or {}).get("labels") or {})
            if template.get("spec"):
                jobset["spec"] = merge(jobset["spec"], template["spec"])
        rjob = next(r for r in jobset["spec"]["replicatedJobs"]
                    if (r["template"].get("metadata") or {}).get("labels", {}).get(ANCESTOR) == "trainer")
        trainer = spec.get("trainer") or {}
        nodes = int(trainer.get("numNodes") or (runtime["spec"].get("mlPolicy") or {}).get("numNodes") or 1)
        pod = rjob["template"]["spec"]["template"]
        container = next(c for c in pod["spec"]["containers"] if c["name"] == "node")
        for key in ("image", "command", "args"):
            if trainer.get(key):
                container[key] = copy.deepcopy(trainer[key])
        container["resources"] = merge(container.get("resources") or {}, trainer.get("resourcesPerNode") or {})
        container["env"] = _upsert_env(container.get("env") or [], [
            *(trainer.get("env") or []),
            {"name": "PET_NNODES", "value": str(nodes)},
            {"name": "PET_NPROC_PER_NODE", "value": str(trainer.get("numProcPerNode", "auto"))},
            {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {
                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
            {"name": "PET_MASTER_ADDR", "value": f"{name}-node-0-0.{name}"},
            {"name": "PET_MASTER_PORT", "value": str(PORT)},
        ])
        pod_meta = pod.setdefault("metadata", {})
        pod_meta["labels"] = {**(pod_meta.get("labels") or {}), "jobset.sigs.k8s.io/jobset-name": name,
                              "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"]}
        pod["spec"]["subdomain"] = name
        job_spec = {**rjob["template"]["spec"], "completionMode": "Indexed", "completions": nodes, "parallelism": nodes,
                    "template": pod}
        return {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{name}-{rjob['name']}-0", "labels": {**labels, **((rjob["template"].get(
                "metadata") or {}).get("labels") or {})}, "annotations": {},
                "ownerReferences": [{"apiVersion": train["apiVersion"], "kind": "TrainJob", "name": name,
                                     "uid": meta["uid"], "controller": True}]},
            "spec": job_spec,
        }
