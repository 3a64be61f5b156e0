"""--queue on a fake cluster that plays Kueue: the run shows the reason Kueue gives for not admitting it (with its place
in line where the visibility API answers), runs once admitted, says so when Kueue evicts it, and shows what it showed
before when the notebook may not read Workloads."""

from __future__ import annotations

import time
from typing import Any

import pytest
from fake_cluster import NAMESPACE, FakeCluster

from nbtrain.bundle import capture_cell
from nbtrain.client import submit_bundle
from nbtrain.model import RunState
from nbtrain.spec import JobSpec

pytestmark = pytest.mark.slow

QUOTA = "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default-flavor, 2 more needed"


def _detail_with(run: Any, backend: Any, text: str, timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    detail = ""
    while time.monotonic() < deadline:
        detail = backend.status(run.handle).detail
        if text in detail:
            return detail
        time.sleep(0.1)
    pytest.fail(f"the run's detail never said {text!r}; it says {detail!r}")


def _submit(backend: Any, name: str, code: str = "6 * 7\n") -> Any:
    return submit_bundle(capture_cell(code, {"__name__": "__main__"}),
                         JobSpec(name=name, nodes=1, backend="kubernetes", device="cpu", queue="team-a"),
                         store=backend.store, backend=backend)


def test_a_queued_run_shows_kueues_reason_and_place_in_line_and_runs_once_admitted(cluster: FakeCluster,
                                                                                   k8s_backend: Any) -> None:
    cluster.add_local_queue(NAMESPACE, "team-a")
    cluster.install_visibility()
    cluster.kueue_pending = QUOTA
    cluster.kueue_ahead = 2  # two Workloads of others are ahead in the LocalQueue
    run = _submit(k8s_backend, "kq")
    detail = _detail_with(run, k8s_backend, QUOTA)
    assert detail.startswith("queued in Kueue (LocalQueue team-a, position 3, 6 in its ClusterQueue): "), detail
    assert run.status() is RunState.QUEUED
    assert f"now: {detail}" in run.summary()
    assert cluster.store.items("pods", NAMESPACE) == []
    job = cluster.store.items("jobs.batch", NAMESPACE)[0]["metadata"]["name"]
    reads = [r for r in cluster.server.requests if r[2] == "workloads"]
    assert reads and all(verb == "list" for verb, *_ in reads)
    cluster.admit(NAMESPACE, job)
    assert run.wait(timeout=60, progress=False) is RunState.SUCCEEDED
    assert run.result() == 42
    # a bounded rate: one read of the Workload every few seconds while queued, not one per loop of the mirror
    waited = [r for r in cluster.server.requests if r[2] == "workloads"]
    assert len(waited) < 10, len(waited)


def test_an_evicted_run_shows_kueues_reason_and_waits_to_be_admitted_again(cluster: FakeCluster, k8s_backend: Any) -> None:
    # admitted, but the pods cannot be placed: Kueue's waitForPodsReady evicts the Workload and requeues it
    cluster.add_local_queue(NAMESPACE, "team-a")
    cluster.unschedulable = "0/3 nodes are available: 3 Insufficient cpu."
    run = _submit(k8s_backend, "evicted")
    _detail_with(run, k8s_backend, "queued in Kueue (LocalQueue team-a)")
    job = cluster.store.items("jobs.batch", NAMESPACE)[0]["metadata"]["name"]
    cluster.admit(NAMESPACE, job)
    _detail_with(run, k8s_backend, "Insufficient cpu")  # admitted: the pods wait for nodes
    message = f"Exceeded the PodsReady timeout {NAMESPACE}/{cluster.workload_of(NAMESPACE, job)['metadata']['name']}"  # type: ignore[index]
    cluster.evict(NAMESPACE, job, "PodsReadyTimeout", message, pending=QUOTA)
    detail = _detail_with(run, k8s_backend, "evicted by Kueue")
    assert f"evicted by Kueue (PodsReadyTimeout: {message}); queued again (LocalQueue team-a)" in detail, detail
    assert detail.endswith(QUOTA)
    assert run.status() is RunState.QUEUED
    run.sync()
    assert any(n.startswith("Kueue evicted the workload (PodsReadyTimeout") for n in run.view.notices), run.view.notices
    cluster.unschedulable = None
    cluster.admit(NAMESPACE, job)  # admitted again, and there are nodes now
    assert run.wait(timeout=60, progress=False) is RunState.SUCCEEDED
    assert run.result() == 42


def test_without_permission_to_read_workloads_a_queued_run_shows_what_it_did_before(cluster: FakeCluster,
                                                                                     k8s_backend: Any) -> None:
    cluster.add_local_queue(NAMESPACE, "team-a")
    cluster.kueue_pending = QUOTA
    cluster.server.deny("list", "workloads.kueue.x-k8s.io")
    run = _submit(k8s_backend, "denied")
    detail = _detail_with(run, k8s_backend, "waiting for Kueue to admit the workload (queue team-a)")
    time.sleep(1.0)
    assert k8s_backend.status(run.handle).detail == detail
    run.sync()
    assert not any("forbidden" in n.lower() for n in run.view.notices), run.view.notices  # no error for it
    denied = [r for r in cluster.server.requests if r[2] == "workloads"]
    assert len(denied) == 1  # asked once, not again and again
    cluster.admit(NAMESPACE, cluster.store.items("jobs.batch", NAMESPACE)[0]["metadata"]["name"])
    assert run.wait(timeout=60, progress=False) is RunState.SUCCEEDED


def test_without_the_visibility_api_the_reason_is_shown_without_a_position(cluster: FakeCluster, k8s_backend: Any) -> None:
    cluster.add_local_queue(NAMESPACE, "team-a")  # Kueue without the visibility API installed
    cluster.kueue_pending = QUOTA
    run = _submit(k8s_backend, "novis")
    detail = _detail_with(run, k8s_backend, QUOTA)
    assert detail == f"queued in Kueue (LocalQueue team-a): {QUOTA}"
    run.cancel()
    assert run.status() is RunState.CANCELLED


def test_kueues_reason_reaches_a_process_that_reads_the_status_file(cluster: FakeCluster, k8s_backend: Any) -> None:
    from nbtrain.backends.kubernetes.files import AttemptFiles

    cluster.add_local_queue(NAMESPACE, "team-a")
    run = _submit(k8s_backend, "file")
    _detail_with(run, k8s_backend, "not yet considered for admission")  # Kueue has not tried it yet
    job = cluster.store.items("jobs.batch", NAMESPACE)[0]["metadata"]["name"]
    with cluster.store.lock:  # now Kueue tries, and says why it cannot admit it; the state stays QUEUED
        workload = cluster.workload_of(NAMESPACE, job)
        assert workload is not None
        workload["status"]["conditions"] = [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                             "message": QUOTA, "lastTransitionTime": "2026-12-02T14:00:00Z"}]
        cluster.store.update("workloads.kueue.x-k8s.io", NAMESPACE, workload)
    _detail_with(run, k8s_backend, QUOTA)
    files = AttemptFiles(k8s_backend.store.attempt_dir(run.id, 0))
    deadline = time.monotonic() + 10
    while QUOTA not in str((files.read_status() or {}).get("detail")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert QUOTA in str((files.read_status() or {}).get("detail")), files.read_status()
    run.cancel()


def test_a_run_kueue_preempts_while_its_pods_run_fails_saying_so(cluster: FakeCluster, k8s_backend: Any,
                                                                   tmp_path: Any) -> None:
    cluster.add_local_queue(NAMESPACE, "team-a")
    started = tmp_path / "started"
    code = (f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\n"
            "for _ in range(600):\n    time.sleep(0.1)\n")
    run = _submit(k8s_backend, "preempted", code)
    _detail_with(run, k8s_backend, "queued in Kueue (LocalQueue team-a)")
    job = cluster.store.items("jobs.batch", NAMESPACE)[0]["metadata"]["name"]
    cluster.admit(NAMESPACE, job)
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert started.exists(), "the cell did not start"
    preempted = "Preempted to accommodate a higher priority Workload"
    cluster.evict(NAMESPACE, job, "Preempted", preempted, pending=QUOTA)
    assert run.wait(timeout=60, raise_on_failure=False, progress=False) is RunState.FAILED
    assert run.failure is not None
    assert run.failure.reason.startswith(f"Kueue evicted the workload (Preempted: {preempted}) while its pods ran"), \
        run.failure.reason
    assert "--max-restarts" in run.failure.reason
