"""Why a ``--queue`` run waits, from Kueue's own objects (pure).

Kueue admits a Job through a Workload object it creates for it (named ``<kind>-<job name>-<hash>``, labelled
``kueue.x-k8s.io/job-uid: <the Job's uid>``, owned by the Job). The Workload's conditions say where admission
stands, in Kueue's words:

- ``QuotaReserved`` False, reason ``Pending`` (or ``Inadmissible``), message e.g. *couldn't assign flavors to pod set
  main: insufficient unused quota for nvidia.com/gpu in flavor default-flavor, 8 more needed* or *LocalQueue q doesn't
  exist*; no condition at all while Kueue has not tried yet (``StrictFIFO`` tries only the head of a ClusterQueue);
- ``QuotaReserved`` True and ``Admitted`` not True: quota is held, admission checks (``status.admissionChecks``,
  e.g. a ProvisioningRequest) still run;
- ``Admitted`` True: Kueue unsuspends the Job;
- ``Evicted`` True (reason ``Preempted``, ``PodsReadyTimeout``, ``InactiveWorkload``, ...): the Job was suspended again
  and waits for a new admission (``status.requeueState``: when, and how many times, after a PodsReadyTimeout).

The on-demand visibility API (``visibility.kueue.x-k8s.io/v1beta1``, ``namespaces/NS/localqueues/Q/pendingworkloads``)
lists the pending Workloads of a LocalQueue with their 0-based ``positionInLocalQueue`` and
``positionInClusterQueue``; where it is not installed or not allowed there is no position, and the reason is shown
without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["JOB_UID_LABEL", "Position", "QueueView", "pending_position", "queue_view"]

JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"


@dataclass(frozen=True)
class Position:
    """A pending Workload's place in line, 1-based (the API's are 0-based)."""

    local: int
    cluster: int | None = None


@dataclass(frozen=True)
class QueueView:
    """What Kueue says about the run: one line for the run's detail, and an eviction worth a NOTICE."""

    detail: str
    admitted: bool = False
    evicted: str = ""  # "REASON: message" while the Workload's Evicted condition is True


def _conditions(workload: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("type", "")): c for c in (workload.get("status") or {}).get("conditions") or []}


def _said(condition: Mapping[str, Any]) -> str:
    """``message``, else ``reason`` of a condition, on one line."""
    text = str(condition.get("message") or condition.get("reason") or "").strip()
    return " ".join(text.split())


def pending_position(summary: Mapping[str, Any] | None, workload_name: str) -> Position | None:
    """The place of ``workload_name`` in a visibility ``PendingWorkloadsSummary`` (None: not listed)."""
    for item in (summary or {}).get("items") or []:
        if str((item.get("metadata") or {}).get("name") or "") != workload_name:
            continue
        local = item.get("positionInLocalQueue")
        cluster = item.get("positionInClusterQueue")
        if not isinstance(local, int):
            return None
        return Position(local + 1, cluster + 1 if isinstance(cluster, int) else None)
    return None


def _in_line(queue: str, position: Position | None, cluster_queue: str) -> str:
    """``(LocalQueue q, position 3, 7 in its ClusterQueue)``: where the run waits, and its place where known."""
    text = f"(LocalQueue {queue}"
    if position is not None:
        text += f", position {position.local}"
        if position.cluster is not None:
            text += f", {position.cluster} in " + (f"ClusterQueue {cluster_queue}" if cluster_queue else "its ClusterQueue")
    return text + ")"


def queue_view(workload: Mapping[str, Any] | None, *, queue: str, position: Position | None = None) -> QueueView | None:
    """Read the run's Workload (None: Kueue has not made one yet, or it could not be read: nothing to add)."""
    if workload is None:
        return None
    conditions = _conditions(workload)
    status = workload.get("status") or {}
    cluster_queue = str((status.get("admission") or {}).get("clusterQueue") or "")
    where = _in_line(queue, position, cluster_queue)
    head = f"queued in Kueue {where}"
    evicted = ""
    eviction = conditions.get("Evicted")
    if eviction is not None and str(eviction.get("status")) == "True":
        evicted = f"{eviction.get('reason') or 'Evicted'}: {_said(eviction)}"
        head = f"evicted by Kueue ({evicted}); queued again {where}"
        requeue = status.get("requeueState") or {}
        if requeue.get("requeueAt"):
            head += f" at {requeue['requeueAt']}"
        if requeue.get("count"):
            head += f" (requeued {requeue['count']} time{'s' if requeue['count'] != 1 else ''})"
    admitted = conditions.get("Admitted")
    if admitted is not None and str(admitted.get("status")) == "True":
        where = f" (ClusterQueue {cluster_queue})" if cluster_queue else ""
        return QueueView(f"admitted by Kueue{where}; the pods are being created", admitted=True, evicted=evicted)
    reserved = conditions.get("QuotaReserved")
    if reserved is not None and str(reserved.get("status")) == "True":
        checks = [c for c in status.get("admissionChecks") or [] if str(c.get("state")) != "Ready"]
        waiting = "; ".join(f"{c.get('name')} {c.get('state')}" + (f": {c['message']}" if c.get("message") else "")
                            for c in checks)
        return QueueView("quota reserved by Kueue" + (f" in ClusterQueue {cluster_queue}" if cluster_queue else "")
                         + (f"; waiting for admission checks: {waiting}" if waiting else "; waiting for admission"),
                         evicted=evicted)
    if reserved is not None:
        reason = str(reserved.get("reason") or "")
        label = "" if reason in ("", "Pending") else f" [{reason}]"
        return QueueView(f"{head}{label}: {_said(reserved)}", evicted=evicted)
    return QueueView(f"{head}: not yet considered for admission", evicted=evicted)
