"""--timeout on the fake cluster: the Job controller fails the Job at activeDeadlineSeconds (DeadlineExceeded) and ends
its pods; the stand-ins for the training operator and the JobSet controller (which run no pods in the fake) fail their
workloads at the deadline with the conditions the real ones write. Every flavor's verdict says the run exceeded
--timeout, with the value."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from fake_cluster import NAMESPACE, FakeCluster

from nbtrain.bundle import capture_cell
from nbtrain.client import submit_bundle
from nbtrain.model import RunState
from nbtrain.spec import JobSpec

pytestmark = pytest.mark.slow


def test_a_job_past_its_timeout_fails_saying_it_exceeded_timeout_with_the_value(
    cluster: FakeCluster, k8s_backend: Any,
) -> None:
    code = "import time\nprint('working', flush=True)\ntime.sleep(600)\n"
    run = submit_bundle(capture_cell(code, {"__name__": "__main__"}),
                        JobSpec(name="slow", nodes=2, backend="kubernetes", device="cpu", timeout_s=6),
                        store=k8s_backend.store, backend=k8s_backend)
    assert run.wait(timeout=120, raise_on_failure=False, progress=False) is RunState.FAILED
    assert run.failure is not None
    assert "exceeded --timeout 6 s" in run.failure.reason, run.failure.reason
    assert "DeadlineExceeded" in run.failure.reason
    kept = json.loads((k8s_backend.store.attempt_dir(run.id, 0) / "status.json").read_text())["workload"]
    assert kept["outcome"] == "failed" and kept["deadline"] == "yes"  # what a collected Job is judged by
    deadline = time.monotonic() + 30
    while cluster.store.items("pods", NAMESPACE) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not cluster.store.items("pods", NAMESPACE), "pods of a run past its deadline were left running"


@pytest.mark.parametrize("flavor", ["pytorchjob", "jobset"])
def test_an_operators_workload_past_its_timeout_fails_saying_it_exceeded_timeout(
    cluster: FakeCluster, k8s_backend: Any, flavor: str,
) -> None:
    cluster.store.crds.update({"pytorchjobs.kubeflow.org", "jobsets.jobset.x-k8s.io"})
    run = submit_bundle(capture_cell("6 * 7\n", {"__name__": "__main__"}),
                        JobSpec(name=f"slow-{flavor}", nodes=2, backend="kubernetes", device="cpu", flavor=flavor,
                                timeout_s=3),
                        store=k8s_backend.store, backend=k8s_backend)
    assert run.wait(timeout=60, raise_on_failure=False, progress=False) is RunState.FAILED
    assert run.failure is not None
    reason = run.failure.reason
    assert "exceeded --timeout 3 s" in reason, reason
    assert {"pytorchjob": "active longer than specified deadline",
            "jobset": "FailJobSetFailurePolicyAction"}[flavor] in reason, reason
