"""Run state from Job and pod objects: queued/starting/running, and the first failing rank."""

from __future__ import annotations

from typing import Any

from nbtrain.backends.kubernetes.podstate import (
    OwnerState,
    first_failure,
    follow_order,
    live_state,
    owner_state,
    parse_time,
    pod_info,
    preemptable,
)
from nbtrain.events import Event, EventKind
from nbtrain.model import RunState


def pod(index: int, *, state: dict[str, Any] | None = None, phase: str = "Running", scheduled: str | None = None) -> dict[str, Any]:
    conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": scheduled}] if scheduled else []
    return {
        "metadata": {"name": f"job-{index}-abcde", "uid": f"uid-{index}",
                     "annotations": {"batch.kubernetes.io/job-completion-index": str(index)}},
        "status": {"phase": phase, "conditions": conditions,
                   "containerStatuses": [{"name": "trainer", "state": state or {"running": {}}}]},
    }


def info(index: int, **kwargs: Any) -> Any:
    return pod_info(pod(index, **kwargs), "job", "trainer")


def test_owner_states() -> None:
    assert not owner_state(None, "job").exists
    assert owner_state({"spec": {"suspend": True}}, "job").suspended
    done = owner_state({"spec": {}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}, "job")
    assert done.outcome is RunState.SUCCEEDED
    failed = owner_state({"spec": {}, "status": {"conditions": [
        {"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "too long"}]}}, "job")
    assert (failed.outcome, failed.reason) == (RunState.FAILED, "DeadlineExceeded")
    assert owner_state({"spec": {"runPolicy": {"suspend": True}}}, "pytorchjob").suspended
    assert owner_state({"spec": {}, "status": {"conditions": [{"type": "Succeeded", "status": "True"}]}},
                       "pytorchjob").outcome is RunState.SUCCEEDED
    assert owner_state({"spec": {}, "status": {"conditions": [{"type": "Completed", "status": "True"}]}},
                       "jobset").outcome is RunState.SUCCEEDED


def test_pending_reasons_show_as_queued_or_starting_with_notices() -> None:
    owner = owner_state({"spec": {}}, "job")
    queued = live_state(owner_state({"spec": {"suspend": True}}, "job"), [], nodes=2, queue="team-a")
    assert queued.state is RunState.QUEUED and "Kueue" in queued.detail and "team-a" in queued.detail
    stuck = live_state(owner, [info(0, phase="Pending", state={"waiting": {"reason": "ContainerCreating"}},
                                    scheduled="0/4 nodes are available: 4 Insufficient nvidia.com/gpu.")], nodes=2, queue=None)
    assert stuck.state is RunState.QUEUED and "Insufficient nvidia.com/gpu" in stuck.detail
    assert stuck.notices == (stuck.detail,)  # shown by the monitor as well
    pulling = live_state(owner, [info(0, phase="Pending", state={"waiting": {"reason": "ImagePullBackOff",
                                                                            "message": "pull access denied"}})],
                         nodes=1, queue=None)
    assert pulling.state is RunState.STARTING and "ImagePullBackOff" in pulling.detail
    assert pulling.notices and "pull access denied" in pulling.notices[0]
    running = live_state(owner, [info(0), info(1)], nodes=2, queue=None)
    assert running.state is RunState.RUNNING


def _error(rank: int, at: float, exc: str, message: str) -> Event:
    return Event(EventKind.RANK_ERROR, f"rank-{rank}", 3, at, 0, rank,
                 {"exc_type": exc, "message": message, "traceback": f"Traceback ...\n{exc}: {message}\n", "cell_line": 4})


def _terminated(code: int, reason: str, at: str) -> dict[str, Any]:
    return {"terminated": {"exitCode": code, "reason": reason, "finishedAt": at}}


def test_first_failure_prefers_the_real_error_over_collateral_ones() -> None:
    owner = owner_state({"spec": {}, "status": {"conditions": [{"type": "Failed", "status": "True",
                                                                "reason": "PodFailurePolicy"}]}}, "job")
    errors = {0: _error(0, 100.0, "DistBackendError", "Connection closed by peer"), 3: _error(3, 101.0, "ValueError", "boom")}
    pods = [info(0, phase="Failed", state=_terminated(1, "Error", "2024-01-01T00:00:05Z")),
            info(1, phase="Failed", state=_terminated(1, "Error", "2024-01-01T00:00:04Z"))]
    failure = first_failure(rank_errors=errors, pods=pods, elastic_codes={}, procs=2, last_lines={3: ["x"]},
                            owner=owner, timeout_s=None)
    assert (failure.rank, failure.node, failure.exc_type, failure.cell_line) == (3, 1, "ValueError", 4)
    assert failure.summary() == "rank 3 (node 1) failed: ValueError: boom (cell line 4)"


def test_oomkilled_pod_is_named_with_its_rank_even_when_others_report_collateral_errors() -> None:
    owner = owner_state(None, "job")
    errors = {0: _error(0, 1.0, "DistBackendError", "Connection reset by peer")}
    pods = [info(0, phase="Failed", state=_terminated(143, "Error", "2024-01-01T00:00:09Z")),
            info(1, phase="Failed", state=_terminated(137, "OOMKilled", "2024-01-01T00:00:08Z"))]
    failure = first_failure(rank_errors=errors, pods=pods, elastic_codes={3: -9}, procs=2, last_lines={},
                            owner=owner, timeout_s=None)
    assert failure.rank == 3 and failure.node == 1 and failure.signal == "SIGKILL"
    assert "OOMKilled" in failure.reason and "--memory" in failure.reason


def test_deadline_and_silent_failures() -> None:
    deadline = owner_state({"spec": {}, "status": {"conditions": [
        {"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]}}, "job")
    failure = first_failure(rank_errors={}, pods=[], elastic_codes={}, procs=1, last_lines={}, owner=deadline, timeout_s=30)
    assert "exceeded --timeout 30 s" in failure.reason
    crashed = [info(1, phase="Failed", state=_terminated(139, "Error", "2024-01-01T00:00:01Z"))]
    failure = first_failure(rank_errors={}, pods=crashed, elastic_codes={}, procs=1, last_lines={}, owner=OwnerState(True),
                            timeout_s=None)
    assert failure.rank == 1 and failure.signal == "SIGSEGV"


def test_parse_time() -> None:
    assert parse_time("1970-01-01T00:01:40Z") == 100.0
    assert parse_time("1970-01-01T00:01:40.25Z") == 100.25
    assert parse_time(None) is None and parse_time("garbage") is None


def test_log_streams_go_to_rank_0_and_failing_pods_first() -> None:
    pods = {f"uid-{i}": info(i) for i in range(4)}
    pods["uid-3"] = info(3, phase="Failed", state=_terminated(1, "Error", "2024-01-01T00:00:01Z"))
    order = [uid for uid, _ in follow_order(reversed(list(pods.items())))]
    assert order == ["uid-0", "uid-3", "uid-1", "uid-2"]
    assert preemptable({"uid-1", "uid-2"}, pods) == "uid-2"  # gives its stream to rank 0's pod
    assert preemptable({"uid-0"}, pods) is None


def test_node_index_of_each_flavors_pods() -> None:
    from nbtrain.backends.kubernetes.podstate import pod_node

    job_pod = {"metadata": {"annotations": {"batch.kubernetes.io/job-completion-index": "3"}}}
    assert pod_node(job_pod, "job") == pod_node(job_pod, "jobset") == 3
    master = {"metadata": {"labels": {"training.kubeflow.org/replica-type": "master",
                                      "training.kubeflow.org/replica-index": "0"}}}
    worker = {"metadata": {"labels": {"training.kubeflow.org/replica-type": "worker",
                                      "training.kubeflow.org/replica-index": "2"}}}
    assert (pod_node(master, "pytorchjob"), pod_node(worker, "pytorchjob")) == (0, 3)
    assert pod_node({"metadata": {}}, "job") == -1
