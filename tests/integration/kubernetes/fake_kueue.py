"""Kueue's stand-in for the fake cluster (fake_cluster.py), installed by :meth:`FakeKueue.add_local_queue`.

A Workload for each queued (labelled, suspended) Job, as Kueue's job framework makes it (named
``job-<name>-<hash>``, labelled ``kueue.x-k8s.io/job-uid``, owned by the Job), pending with ``QuotaReserved`` False and
the cluster's ``kueue_pending`` as the message (no condition while it is None: not yet tried); :meth:`~FakeKueue.admit`
reserves quota, admits and unsuspends the Job; :meth:`~FakeKueue.evict` marks it Evicted, suspends the Job again (its
pods go) and puts it back in line. :meth:`~FakeKueue.install_visibility` serves the on-demand visibility API (pending
positions; the cluster's ``kueue_ahead`` Workloads of others in line first).
"""

from __future__ import annotations

import copy
import hashlib
from typing import TYPE_CHECKING, Any

from fake_apiserver import ApiError, now_rfc3339

if TYPE_CHECKING:
    from fake_cluster import FakeCluster


class FakeKueue:
    """Kueue's controller and visibility API for a :class:`~fake_cluster.FakeCluster` (see the module docstring)."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.c = cluster

    def admit(self, namespace: str, name: str) -> None:
        """What Kueue does on admission: reserve quota and admit the Job's Workload (if Kueue is installed), then
        unsuspend the Job."""
        with self.c.store.lock:
            workload = self.workload_of(namespace, name)
            if workload is not None:
                workload["status"]["admission"] = {"clusterQueue": "cluster-queue", "podSetAssignments": []}
                _condition(workload, "QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cluster-queue")
                _condition(workload, "Admitted", "True", "Admitted", "The workload is admitted")
                _condition(workload, "Evicted", "False", "Admitted", "The workload is admitted")
                self.c.store.update("workloads.kueue.x-k8s.io", namespace, workload)
            job = copy.deepcopy(self.c.store.get("jobs.batch", namespace, name))
            job["spec"]["suspend"] = False
            self.c.store.update("jobs.batch", namespace, job)
        self.c._wake.set()

    def evict(self, namespace: str, name: str, reason: str, message: str, *, pending: str | None = None) -> None:
        """What Kueue does when it evicts the Job's Workload (preemption, PodsReadyTimeout): Evicted, quota released,
        the Job suspended again (its pods are deleted) and the Workload pending again (``pending``: its message)."""
        with self.c.store.lock:
            workload = self.workload_of(namespace, name)
            assert workload is not None, f"no Workload for Job {name}"
            workload["status"].pop("admission", None)
            _condition(workload, "Evicted", "True", reason, message)
            _condition(workload, "Admitted", "False", "NoReservation", "The workload has no reservation")
            _condition(workload, "QuotaReserved", "False", "Pending", pending or message)
            self.c.store.update("workloads.kueue.x-k8s.io", namespace, workload)
            job = copy.deepcopy(self.c.store.get("jobs.batch", namespace, name))
            job["spec"]["suspend"] = True
            self.c.store.update("jobs.batch", namespace, job)
        self.c._wake.set()

    def workload_of(self, namespace: str, job: str) -> dict[str, Any] | None:
        """A copy of the Kueue Workload of Job ``job`` (None: none yet)."""
        with self.c.store.lock:
            found = self.c.store.find("jobs.batch", namespace, job)
            uid = found["metadata"]["uid"] if found else None
            for workload in self.c.store.items("workloads.kueue.x-k8s.io", namespace):
                if uid and workload["metadata"]["labels"].get("kueue.x-k8s.io/job-uid") == uid:
                    return copy.deepcopy(workload)
        return None

    def install_visibility(self) -> None:
        """Serve Kueue's on-demand visibility API (localqueues/pendingworkloads)."""
        self.c.store.crds.add("localqueues/pendingworkloads.visibility.kueue.x-k8s.io")

    def pending_workloads(self, namespace: str, queue: str) -> dict[str, Any]:
        """The visibility API's PendingWorkloadsSummary of LocalQueue ``queue`` (0-based positions, oldest first)."""
        with self.c.store.lock:
            if self.c.store.find("localqueues.kueue.x-k8s.io", namespace, queue) is None:
                raise_not_found(f'localqueues.kueue.x-k8s.io "{queue}" not found')
            pending = [w for w in self.c.store.items("workloads.kueue.x-k8s.io", namespace)
                       if w["spec"].get("queueName") == queue and not _is_true(w, "QuotaReserved")]
            pending.sort(key=lambda w: int(w["metadata"]["resourceVersion"]))
            items = [{"metadata": {"name": w["metadata"]["name"], "namespace": namespace,
                                   "ownerReferences": w["metadata"].get("ownerReferences") or []},
                      "priority": 0, "localQueueName": queue, "positionInLocalQueue": self.c.kueue_ahead + index,
                      "positionInClusterQueue": self.c.kueue_ahead + index + 3}
                     for index, w in enumerate(pending)]
        return {"kind": "PendingWorkloadsSummary", "apiVersion": "visibility.kueue.x-k8s.io/v1beta1",
                "metadata": {}, "items": items}

    def add_local_queue(self, namespace: str, name: str) -> None:
        """Install Kueue (its LocalQueue and Workload resources, if not yet) and create the LocalQueue ``name``."""
        self.c.store.crds.update({"localqueues.kueue.x-k8s.io", "workloads.kueue.x-k8s.io"})
        self.c.store.create("localqueues.kueue.x-k8s.io", namespace, {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": {"name": name},
            "spec": {"clusterQueue": "cluster-queue"}})

    def reconcile(self, job: dict[str, Any]) -> None:
        """Kueue's job framework, as far as the fake plays it: a queued Job gets its Workload (pending)."""
        meta = job["metadata"]
        queue = (meta.get("labels") or {}).get("kueue.x-k8s.io/queue-name")
        if not queue or "workloads.kueue.x-k8s.io" not in self.c.store.crds or meta.get("deletionTimestamp"):
            return
        ns, uid = meta["namespace"], meta["uid"]
        if any(w["metadata"]["labels"].get("kueue.x-k8s.io/job-uid") == uid
               for w in self.c.store.items("workloads.kueue.x-k8s.io", ns)):
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
        if self.c.kueue_pending is not None:
            _condition(workload, "QuotaReserved", "False", "Pending", self.c.kueue_pending)
        self.c.store.create("workloads.kueue.x-k8s.io", ns, workload)


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
