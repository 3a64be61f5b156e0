"""--timeout on the fake cluster: the Job controller fails the Job at activeDeadlineSeconds (DeadlineExceeded) and ends
its pods; the verdict says the run exceeded --timeout, with the value. (The fake plays no JobSet or PyTorchJob
controller that runs pods; their deadline conditions are checked on the objects in tests/unit/kubernetes.)"""

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
