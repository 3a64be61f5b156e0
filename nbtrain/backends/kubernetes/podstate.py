"""Run state from Kubernetes objects: the workload's conditions and its pods' status (pure).

The notebook has no controller on the cluster, so everything the local supervisor knows first-hand
is read off the API objects here: queued (suspended by Kueue, or pods unschedulable), starting (pods
being created, images pulling: with the reason), running (every node's pod up), and the verdict with
the first failing rank: from its RANK_ERROR event when it sent one, else from the pod (OOMKilled,
exit code, signal) and torchelastic's per-rank exit codes in the launcher's output.
"""

from __future__ import annotations

import calendar
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nbtrain.backends import triage
from nbtrain.events import Event
from nbtrain.model import Failure, RunState

__all__ = [
    "OwnerState", "PodInfo", "collected_outcome", "deadline_reason", "first_failure", "follow_order", "live_state", "missing_claim",
    "owner_state", "parse_time", "pod_info", "preemptable",
]

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
_BAD_WAITING = {
    "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
    "CreateContainerError", "CrashLoopBackOff", "RunContainerError",
}


def parse_time(text: str | None) -> float | None:
    """RFC 3339 (``2024-05-01T10:00:00Z``, fractions allowed) -> epoch seconds."""
    if not text:
        return None
    head, _, frac = text.rstrip("Z").partition(".")
    try:
        base = calendar.timegm(time.strptime(head, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None
    return base + (float("0." + frac) if frac.isdigit() else 0.0)


@dataclass(frozen=True)
class OwnerState:
    """What the workload object says: gone, suspended, or finished (``outcome``)."""

    exists: bool
    suspended: bool = False
    outcome: RunState | None = None  # SUCCEEDED or FAILED once the workload says so
    reason: str = ""
    message: str = ""
    deleting: bool = False
    deadline: bool = False  # FAILED because it ran past activeDeadlineSeconds (--timeout), however the owner says it


# How each owner says "ran past activeDeadlineSeconds" (what the controllers set, at the versions tests/data/crds has):
# - Job: a Failed (and FailureTarget) condition with reason DeadlineExceeded (batchv1.JobReasonDeadlineExceeded;
#   message "Job was active longer than specified deadline").
# - PyTorchJob: a Failed condition with reason "PyTorchJobFailed" (commonutil.NewReason(kind, JobFailedReason), the same
#   reason as any other failure) and the message "Job NAME has failed because it was active longer than specified
#   deadline" (kubeflow/training-operator release-1.9, pkg/controller.v1/common/job.go, ReconcileJobs).
# - JobSet: the deadline is its child Job's; without a rule the JobSet says only ReachedMaxRestarts ("jobset failed due
#   to reaching max number of restarts (first failed job: ...)"), so nbtrain's JobSets carry the failure-policy rule
#   FailJobSet on the child Job's failure reason DeadlineExceeded (manifests.JOBSET_DEADLINE_RULE), which fails the
#   JobSet with reason FailJobSetFailurePolicyAction (kubernetes-sigs/jobset pkg/constants/constants.go,
#   FailJobSetActionReason; pkg/controllers/failure_policy.go, failJobSetActionApplier). That reason means the
#   deadline only when the JobSet's FailJobSet rules all match DeadlineExceeded alone, which is checked on its spec.
# - TrainJob (Kubeflow Trainer v2): Trainer's controller enforces spec.activeDeadlineSeconds itself: a Failed condition
#   with reason DeadlineExceeded (TrainJobDeadlineExceededReason) and the message "TrainJob exceeded its active
#   deadline", and it deletes the JobSet (kubeflow/trainer pkg/controller/trainjob_controller.go, reconcileDeadline).
#   Its other endings are its JobSet's Completed/Failed conditions copied as Complete/Failed (jobset plugin, Status).
JOB_DEADLINE_REASON = "DeadlineExceeded"
PYTORCHJOB_DEADLINE_MESSAGE = "active longer than specified deadline"
JOBSET_FAIL_RULE_REASON = "FailJobSetFailurePolicyAction"


def _jobset_fails_only_on_deadlines(spec: Mapping[str, Any]) -> bool:
    rules = [r for r in (spec.get("failurePolicy") or {}).get("rules") or [] if r.get("action") == "FailJobSet"]
    return bool(rules) and all(r.get("onJobFailureReasons") == [JOB_DEADLINE_REASON]
                               and not r.get("onJobFailureMessagePatterns") for r in rules)


def _is_deadline(flavor: str, spec: Mapping[str, Any], condition: Mapping[str, Any]) -> bool:
    reason, message = str(condition.get("reason") or ""), str(condition.get("message") or "")
    if flavor == "pytorchjob":
        return PYTORCHJOB_DEADLINE_MESSAGE in message
    if flavor == "jobset":
        return reason == JOBSET_FAIL_RULE_REASON and _jobset_fails_only_on_deadlines(spec)
    return reason == JOB_DEADLINE_REASON


def _true_conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return {c.get("type", ""): c for c in conditions if str(c.get("status")) == "True"}


def owner_state(obj: Mapping[str, Any] | None, flavor: str) -> OwnerState:
    """Interpret a Job / PyTorchJob / JobSet / TrainJob (None: it does not exist)."""
    if obj is None:
        return OwnerState(exists=False)
    spec = obj.get("spec") or {}
    conditions = _true_conditions(obj)
    deleting = bool((obj.get("metadata") or {}).get("deletionTimestamp"))
    success: tuple[str, ...]
    failure: tuple[str, ...]
    if flavor == "pytorchjob":
        suspended = bool((spec.get("runPolicy") or {}).get("suspend")) or "Suspended" in conditions
        success, failure = ("Succeeded",), ("Failed",)
    elif flavor == "jobset":
        suspended = bool(spec.get("suspend")) or "Suspended" in conditions
        success, failure = ("Completed",), ("Failed",)
    elif flavor == "trainjob":
        suspended = bool(spec.get("suspend")) or "Suspended" in conditions
        success, failure = ("Complete",), ("Failed",)
    else:
        suspended = bool(spec.get("suspend")) or "Suspended" in conditions
        success, failure = ("Complete", "SuccessCriteriaMet"), ("Failed", "FailureTarget")
    for kind in failure:
        if kind in conditions:
            c = conditions[kind]
            return OwnerState(True, False, RunState.FAILED, str(c.get("reason") or ""), str(c.get("message") or ""),
                              deleting, _is_deadline(flavor, spec, c))
    for kind in success:
        if kind in conditions:
            return OwnerState(True, False, RunState.SUCCEEDED, deleting=deleting)
    return OwnerState(True, suspended, deleting=deleting)


@dataclass(frozen=True)
class PodInfo:
    """The facts about one pod that nbtrain uses."""

    name: str
    uid: str
    node: int
    phase: str
    running: bool = False
    terminated: bool = False
    exit_code: int | None = None
    reason: str = ""  # termination reason: Completed, Error, OOMKilled, StartError...
    message: str = ""  # the kubelet's termination message (why a container could not start, ...)
    finished: float | None = None
    waiting: str = ""  # waiting reason: ContainerCreating, ImagePullBackOff...
    waiting_message: str = ""
    unschedulable: str = ""  # the scheduler's message while the pod cannot be placed
    deleting: bool = False

    @property
    def started(self) -> bool:
        """The container started (its log exists)."""
        return self.running or self.terminated

    @property
    def failed(self) -> bool:
        """The trainer container ended badly."""
        return self.terminated and (self.exit_code not in (0, None) or self.phase == "Failed")


def pod_node(pod: Mapping[str, Any], flavor: str) -> int:
    """The node index (machine rank) of a pod of ``flavor``; -1 when it cannot be told."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    if flavor == "pytorchjob":
        kind = str(labels.get(REPLICA_TYPE, "")).lower()
        index = labels.get(REPLICA_INDEX)
        if kind == "master":
            return 0
        if kind == "worker" and str(index).isdigit():
            return int(str(index)) + 1
        return -1
    value = annotations.get(COMPLETION_INDEX, labels.get(COMPLETION_INDEX))
    return int(str(value)) if str(value).isdigit() else -1


def pod_info(pod: Mapping[str, Any], flavor: str, container: str) -> PodInfo:
    """Read a pod object."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    statuses = [s for s in status.get("containerStatuses") or [] if s.get("name") == container]
    state = (statuses[0].get("state") or {}) if statuses else {}
    unschedulable = ""
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and str(condition.get("status")) == "False":
            unschedulable = str(condition.get("message") or condition.get("reason") or "unschedulable")
    terminated = state.get("terminated") or {}
    waiting = state.get("waiting") or {}
    phase = str(status.get("phase") or "Pending")
    return PodInfo(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", meta.get("name", ""))),
        node=pod_node(pod, flavor),
        phase=phase,
        running="running" in state,
        terminated=bool(terminated) or (phase in ("Succeeded", "Failed") and not waiting),
        exit_code=terminated.get("exitCode") if terminated else None,
        reason=str(terminated.get("reason") or ""),
        message=str(terminated.get("message") or "").strip()[:500],
        finished=parse_time(terminated.get("finishedAt")) if terminated else None,
        waiting=str(waiting.get("reason") or ""),
        waiting_message=str(waiting.get("message") or ""),
        unschedulable=unschedulable,
        deleting=bool(meta.get("deletionTimestamp")),
    )


@dataclass(frozen=True)
class Live:
    """A non-final reading: the state, one line of detail, and problems worth a NOTICE."""

    state: RunState
    detail: str = ""
    notices: tuple[str, ...] = ()


def live_state(owner: OwnerState, pods: Iterable[PodInfo], *, nodes: int, queue: str | None) -> Live:
    """State of a run whose workload has no outcome yet."""
    current = [p for p in pods if not p.deleting]
    notices = []
    for pod in current:
        if pod.waiting in _BAD_WAITING:
            notices.append(f"pod {pod.name} (node {pod.node}) cannot start: {pod.waiting}"
                           + (f": {pod.waiting_message}" if pod.waiting_message else ""))
    if owner.suspended:
        why = f"waiting for Kueue to admit the workload (queue {queue})" if queue else "the workload is suspended"
        return Live(RunState.QUEUED, why, tuple(notices))
    stuck = [p for p in current if p.unschedulable and not p.started]
    if stuck:
        why = f"pod {stuck[0].name} cannot be scheduled yet: {stuck[0].unschedulable}"
        return Live(RunState.QUEUED, why, (*notices, why))
    running = sum(1 for p in current if p.running)
    if running >= nodes:
        return Live(RunState.RUNNING, f"{running}/{nodes} pods running", tuple(notices))
    waiting = sorted({p.waiting for p in current if p.waiting})
    detail = f"{running}/{nodes} pods running" + (f" ({', '.join(waiting)})" if waiting else "")
    if not current:
        detail = "creating pods"
    return Live(RunState.STARTING, detail, tuple(notices))


_MISSING_CLAIM = re.compile(r'persistentvolumeclaim "([^"]+)" not found')


def missing_claim(pods: Iterable[PodInfo]) -> tuple[PodInfo, str] | None:
    """A pod the scheduler cannot place because a PersistentVolumeClaim it mounts does not exist, with the claim's
    name (the scheduler leaves such a pod Pending for ever; nbtrain fails the run naming the claim instead)."""
    for pod in pods:
        found = _MISSING_CLAIM.search(pod.unschedulable) if not pod.started else None
        if found:
            return pod, found.group(1)
    return None


def follow_order(waiting: Iterable[tuple[str, PodInfo]]) -> list[tuple[str, PodInfo]]:
    """Which pod logs to read first: node 0 (rank 0), then failed pods, then by node."""
    return sorted(waiting, key=lambda item: (item[1].node != 0, not item[1].failed, item[1].node))


def preemptable(running: Iterable[str], infos: Mapping[str, PodInfo]) -> str | None:
    """The followed running pod that gives its stream to rank 0's: the one with the highest node."""
    others = [uid for uid in running if uid in infos and infos[uid].node != 0]
    return max(others, key=lambda uid: infos[uid].node) if others else None


def collected_outcome(*, kind: str, name: str, ttl_s: int | None, ranks_done: int, world: int) -> tuple[RunState, str]:
    """How a run ends whose workload is gone when nbtrain never saw how it ended: no outcome was kept in status.json
    and no rank error or failed pod was mirrored (a Job the TTL collected while no process followed the run).

    What the store has decides, never the workload's absence: SUCCEEDED when every rank's RANK_DONE was mirrored (a
    success stays a success); otherwise FAILED with a reason saying the outcome is unknown and why, and naming
    NBTRAIN_K8S_TTL, the fix. Returns (state, reason)."""
    if world > 0 and ranks_done >= world:
        return RunState.SUCCEEDED, f"every rank reported done; the {kind} was collected before nbtrain saw it end"
    ttl = f"its ttlSecondsAfterFinished, {ttl_s} s" if ttl_s is not None else "its TTL"
    return RunState.FAILED, (
        f"the outcome is unknown: the {kind} {name} was collected ({ttl}) or deleted before nbtrain saw it end, and "
        f"only {ranks_done} of {world} ranks had reported done in the output copied so far (no rank reported an "
        "error). No process followed the run while it ended (the kernel was gone); set NBTRAIN_K8S_TTL longer than "
        "a run may go unwatched, or attach before the TTL passes")


def deadline_reason(timeout_s: float | None, owner: OwnerState) -> str:
    """The verdict of a run the cluster ended at its deadline (every flavor words it the same)."""
    said = f"{owner.reason}: {owner.message}" if owner.message else owner.reason
    limit = f" {timeout_s:g} s" if timeout_s else ""
    return (f"the run exceeded --timeout{limit}: the cluster ended it at the workload's activeDeadlineSeconds "
            f"({said}); give it a longer --timeout or make the cell finish sooner")


_KILLED = {137, 143, -9, -15}  # SIGKILL/SIGTERM: usually the controller ending the rest of the gang


def first_failure(
    *,
    rank_errors: Mapping[int, Event],
    pods: Iterable[PodInfo],
    elastic_codes: Mapping[int, int],
    procs: int,
    last_lines: Mapping[int, list[str]],
    owner: OwnerState,
    timeout_s: float | None,
) -> Failure:
    """The first failing rank and why (see the module docstring for the order of evidence)."""
    node_of = {rank: rank // max(1, procs) for rank in set(rank_errors) | set(elastic_codes)}
    if owner.deadline:
        return Failure(reason=deadline_reason(timeout_s, owner))
    tiers: list[tuple[int, float, triage.Candidate]] = []
    for rank, event in rank_errors.items():
        candidate = triage.Candidate(
            rank=rank, time=event.time, exc_type=event.data.get("exc_type"), message=event.data.get("message"),
            traceback=event.data.get("traceback"), cell_line=event.data.get("cell_line"), exit_code=1,
        )
        tiers.append((3 if triage.is_collateral(candidate) else 0, event.time, candidate))
    for pod in pods:
        if not pod.failed or pod.node < 0:
            continue
        ranks = range(pod.node * procs, (pod.node + 1) * procs)
        if any(r in rank_errors for r in ranks) and pod.reason != "OOMKilled":
            continue  # the rank's own report says more than its pod's exit code
        bad = [r for r in ranks if elastic_codes.get(r) not in (None, 0)]
        rank = bad[0] if bad else pod.node * procs
        node_of[rank] = pod.node
        code = elastic_codes.get(rank, pod.exit_code)
        when = pod.finished or time.time()
        if pod.reason == "OOMKilled":
            reason = (f"OOMKilled: pod {pod.name} ran out of memory (the kernel killed it); give the pods more "
                      "memory (--memory) or use less per rank")
            tiers.append((1, when, triage.Candidate(rank=rank, time=when, exit_code=code, reason=reason)))
        else:
            killed = code in _KILLED or pod.exit_code in _KILLED
            reason = (f"pod {pod.name} ended with exit code {pod.exit_code}" + (f" ({pod.reason})" if pod.reason else "")
                      + (f": {pod.message}" if pod.message else ""))
            tiers.append((4 if killed else 2, when, triage.Candidate(rank=rank, time=when, exit_code=code, reason=reason)))
    if not tiers:
        if owner.reason or owner.message:
            return Failure(reason=f"the workload failed: {owner.reason}{': ' + owner.message if owner.message else ''}")
        return Failure(reason="the workload failed without a report from any rank or pod")
    tiers.sort(key=lambda t: (t[0], t[1]))
    chosen = triage.choose_first_failure([tiers[0][2]], node_of=node_of, last_lines=dict(last_lines),
                                         exit_codes=dict(elastic_codes))
    return chosen or Failure(reason="unknown")
