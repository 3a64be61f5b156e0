"""--volume on the fake cluster: a claim is one host directory every pod of every attempt shares, a claim that does
not exist fails the run naming it (instead of "queued" until --timeout), and a cancel between attempts ends the run."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from fake_cluster import NAMESPACE, FakeCluster

from nbtrain.bundle import capture_cell
from nbtrain.client import submit_bundle
from nbtrain.model import RunState
from nbtrain.spec import JobSpec

pytestmark = pytest.mark.slow


def test_every_pod_writes_to_the_one_directory_behind_the_claim(cluster: FakeCluster, k8s_backend: Any) -> None:
    shared = cluster.add_claim(NAMESPACE, "team-data")
    # the path comes through the environment: the fake kubelet maps mount paths in argv and env, not in code
    code = ("import os, pathlib\nshared = pathlib.Path(os.environ['SHARED'])\n"
            "(shared / ('from-rank-' + os.environ['RANK'])).write_text('hi')\n")
    run = submit_bundle(capture_cell(code, {"__name__": "__main__"}),
                        JobSpec(name="shared", nodes=2, backend="kubernetes", device="cpu", env={"SHARED": "/shared"},
                                volumes=("team-data:/shared",)),
                        store=k8s_backend.store, backend=k8s_backend)
    assert run.wait(timeout=90, progress=False) is RunState.SUCCEEDED
    assert sorted(p.name for p in shared.iterdir()) == ["from-rank-0", "from-rank-1"]


def test_a_claim_that_does_not_exist_fails_the_run_naming_it_and_deletes_the_workload(cluster: FakeCluster,
                                                                                       k8s_backend: Any) -> None:
    run = submit_bundle(capture_cell("6 * 7\n", {"__name__": "__main__"}),
                        JobSpec(name="noclaim", backend="kubernetes", device="cpu", volumes=("no-such-claim:/data",),
                                max_restarts=2),
                        store=k8s_backend.store, backend=k8s_backend)
    assert run.wait(timeout=90, raise_on_failure=False, progress=False) is RunState.FAILED
    assert run.failure is not None
    reason = run.failure.reason
    assert "--volume claim 'no-such-claim' does not exist in namespace nbtrain-test" in reason, reason
    assert "kubectl get pvc -n nbtrain-test" in reason, reason
    assert [a["attempt"] for a in run.attempts()] == [0], "a missing claim must not be retried"
    deadline = time.monotonic() + 30
    while cluster.store.items("jobs.batch", NAMESPACE) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not cluster.store.items("jobs.batch", NAMESPACE), "the Job waiting for the claim was left behind"


def test_a_cancel_while_a_restart_is_due_ends_the_run_without_a_new_attempt(cluster: FakeCluster, k8s_backend: Any,
                                                                             home: Path) -> None:
    from nbtrain.backends.kubernetes.backend import stop_mirrors

    cluster.add_claim(NAMESPACE, "ckpt")
    run = submit_bundle(capture_cell("raise RuntimeError('attempt fails')\n", {"__name__": "__main__"}),
                        JobSpec(name="cancelled", backend="kubernetes", device="cpu", volumes=("ckpt:/ckpt",),
                                max_restarts=3),
                        store=k8s_backend.store, backend=k8s_backend)
    status = k8s_backend.store.attempt_dir(run.id, 0) / "status.json"
    run.stop_watching()  # no watcher polls status, so nothing starts attempt 1 before the cancel
    deadline = time.monotonic() + 90
    while '"retrying": true' not in (status.read_text() if status.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert '"retrying": true' in status.read_text(), "attempt 0 never failed with a restart due"
    stop_mirrors()
    k8s_backend.cancel(run.handle)
    assert k8s_backend.status(run.handle).state is RunState.CANCELLED
    assert not k8s_backend.store.attempt_dir(run.id, 1).exists(), "a cancelled run started another attempt"
    assert [(a["attempt"], a["state"]) for a in run.attempts()] == [(0, "cancelled")]


def test_a_restart_that_cannot_be_planned_ends_the_run_saying_why(cluster: FakeCluster, k8s_backend: Any) -> None:
    import shutil

    from nbtrain.backends.kubernetes.backend import stop_mirrors

    cluster.add_claim(NAMESPACE, "ckpt")
    run = submit_bundle(capture_cell("raise RuntimeError('attempt fails')\n", {"__name__": "__main__"}),
                        JobSpec(name="unplannable", backend="kubernetes", device="cpu", volumes=("ckpt:/ckpt",),
                                max_restarts=1),
                        store=k8s_backend.store, backend=k8s_backend)
    status = k8s_backend.store.attempt_dir(run.id, 0) / "status.json"
    run.stop_watching()
    deadline = time.monotonic() + 90
    while '"retrying": true' not in (status.read_text() if status.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert '"retrying": true' in status.read_text(), "attempt 0 never failed with a restart due"
    stop_mirrors()
    shutil.rmtree(k8s_backend.store.bundles / k8s_backend.store.load(run.id).bundle_digest)
    state = k8s_backend.status(run.handle)
    assert state.state is RunState.FAILED
    assert state.failure is not None and "the automatic restart (attempt 1) failed" in state.failure.reason, state
    assert not k8s_backend.store.attempt_dir(run.id, 1).exists()
    assert [(a["attempt"], a["state"]) for a in run.attempts()] == [(0, "failed")]
    assert run.status() is RunState.FAILED
