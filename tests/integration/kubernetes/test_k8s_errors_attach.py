"""API errors as the user sees them, and runs that outlive the kernel (attach, logs after the pods are gone)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from fake_cluster import NAMESPACE, FakeCluster
from IPython.core.error import UsageError

from nbtrain.backends.kubernetes.backend import stop_mirrors
from nbtrain.bundle import capture_cell
from nbtrain.client import attach, submit_bundle
from nbtrain.errors import BackendError
from nbtrain.model import RunState
from nbtrain.spec import JobSpec
from nbtrain.store import Store

pytestmark = pytest.mark.slow


def _plan(backend: Any, run_id: str, **fields: Any) -> Any:
    bundle = capture_cell("6 * 7\n", {"__name__": "__main__"})
    directory = bundle.write(backend.store.bundles)
    return backend.plan(JobSpec(backend="kubernetes", **fields), str(directory), bundle.digest, run_id)


def test_403_is_a_clear_error_naming_verb_resource_namespace_and_the_role(cluster: FakeCluster, run_cell: Any) -> None:
    cluster.server.deny("create", "jobs.batch")
    with pytest.raises(UsageError) as caught:  # the magic's form of the BackendError: nothing was submitted
        run_cell("%%distributed --backend kubernetes --name denied\n1 + 1\n")
    text = str(caught.value)
    assert "nothing was submitted" in text and "403 Forbidden" in text and "'create' verb on 'jobs.batch'" in text and f"namespace '{NAMESPACE}'" in text
    assert "cannot create resource \"jobs\"" in text and "rbac.yaml" in text
    assert cluster.store.items("jobs.batch", NAMESPACE) == [] and cluster.store.items("configmaps", NAMESPACE) == []


def test_409_names_the_object_and_a_failed_owned_object_rolls_the_job_back(cluster: FakeCluster, k8s_backend: Any) -> None:
    plan = _plan(k8s_backend, "dup-0a1b2c", device="cpu")
    cluster.store.create("configmaps", NAMESPACE, {"apiVersion": "v1", "kind": "ConfigMap",
                                                   "metadata": {"name": "dup-0a1b2c-bundle"}})
    with pytest.raises(BackendError, match=r"configmaps 'dup-0a1b2c-bundle' already exists in namespace 'nbtrain-test' \(409 AlreadyExists\)"):
        k8s_backend.submit(plan)
    assert ("jobs.batch", "dup-0a1b2c", "Foreground") in cluster.server.deletes  # the Job was taken back
    deadline = time.monotonic() + 15
    while cluster.store.items("jobs.batch", NAMESPACE) and time.monotonic() < deadline:
        time.sleep(0.1)  # foreground deletion: the Job goes once its pod is gone
    assert cluster.store.items("jobs.batch", NAMESPACE) == [] and cluster.store.items("pods", NAMESPACE) == []
    cluster.store.remove("configmaps", NAMESPACE, "dup-0a1b2c-bundle")
    cluster.store.create("jobs.batch", NAMESPACE, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "dup-0a1b2c"},
                                                   "spec": {"suspend": True, "template": {"spec": {"containers": []}}}})
    with pytest.raises(BackendError, match=r"jobs.batch 'dup-0a1b2c' already exists.*kubectl delete jobs.batch dup-0a1b2c"):
        k8s_backend.submit(plan)


def test_a_missing_crd_names_what_to_install(cluster: FakeCluster, k8s_backend: Any) -> None:
    with pytest.raises(BackendError, match=r"no pytorchjobs.kubeflow.org CustomResourceDefinition.*Training Operator"):
        k8s_backend.submit(_plan(k8s_backend, "ptj-0a1b2c", flavor="pytorchjob", nodes=2, device="cpu"))
    cluster.store.crds.add("jobsets.jobset.x-k8s.io")
    handle = k8s_backend.submit(_plan(k8s_backend, "js-0a1b2c", flavor="jobset", nodes=2, device="cpu"), dry_run=True)
    assert handle.data["kind"] == "JobSet" and cluster.store.items("jobsets.jobset.x-k8s.io", NAMESPACE) == []


def test_attach_after_the_kernel_died_mirrors_the_finished_pods_and_logs_survive_them(
    cluster: FakeCluster, k8s_backend: Any, home: Path,
) -> None:
    bundle = capture_cell("for i in range(3):\n    print(f'hello {i} from the past', flush=True)\n6 * 7\n",
                          {"__name__": "__main__"})
    run = submit_bundle(bundle, JobSpec(name="later", nodes=2, backend="kubernetes", device="cpu"),
                        store=k8s_backend.store, backend=k8s_backend)
    run.stop_watching()
    stop_mirrors()  # the kernel is gone: nobody follows the run while it runs
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        jobs = cluster.store.items("jobs.batch", NAMESPACE)
        if any(c["type"] == "Complete" for c in (jobs[0].get("status") or {}).get("conditions", [])):
            break
        time.sleep(0.2)
    else:
        pytest.fail("the Job did not complete")

    again = attach(run.id, store=Store(home))  # a new kernel: everything from the store and the API server
    assert again.wait(timeout=60) is RunState.SUCCEEDED
    assert again.result() == 42
    lines = again.logs(0).splitlines()
    assert [line for line in lines if "from the past" in line] == [f"hello {i} from the past" for i in range(3)]

    cluster.delete("jobs.batch", NAMESPACE, run.backend._target(run.handle).name, "Background")  # ttl ran out
    deadline = time.monotonic() + 10
    while cluster.store.items("pods", NAMESPACE) and time.monotonic() < deadline:
        time.sleep(0.1)
    later = attach(run.id, store=Store(home), watch=False)
    assert later.status() is RunState.SUCCEEDED
    assert "hello 2 from the past" in later.logs(1)
    listed = [h.run_id for h in later.backend.list()]
    assert run.id in listed
