"""What breaks once a platform team runs the backend (issue 16), each against a fake cluster that behaves like
a real one: a kubelet that rotates container logs, an admission that rejects pods, an image without Accelerate,
TTL collection of finished Jobs, Kueue without the LocalQueue."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from fake_cluster import NAMESPACE, FakeCluster

from nbtrain.backends.kubernetes.backend import stop_mirrors
from nbtrain.bundle import capture_cell
from nbtrain.client import attach, submit_bundle
from nbtrain.errors import RunFailedError
from nbtrain.model import RunState
from nbtrain.spec import JobSpec
from nbtrain.store import Store

pytestmark = pytest.mark.slow


def _wait(what: Any, timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            pytest.fail(message)
        time.sleep(0.1)


def _job_done(cluster: FakeCluster) -> bool:
    jobs = cluster.store.items("jobs.batch", NAMESPACE)
    return bool(jobs) and any(c["type"] in ("Complete", "Failed") for c in (jobs[0].get("status") or {}).get("conditions", []))


def test_a_log_the_kubelet_rotated_resumes_by_timestamp_and_says_what_was_lost(
    cluster: FakeCluster, k8s_backend: Any, home: Path, tmp_path: Path,
) -> None:
    cluster.log_keep_lines = 50  # the kubelet keeps the newest 50 lines of each container log
    go = tmp_path / "go"
    code = (f"import os, time\nfor i in range(20):\n    print(f'line {{i}}', flush=True)\n"
            f"while not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\n"
            "for i in range(20, 150):\n    print(f'line {i}', flush=True)\n6 * 7\n")
    bundle = capture_cell(code, {"__name__": "__main__"})
    run = submit_bundle(bundle, JobSpec(name="rotate", nodes=1, backend="kubernetes", device="cpu"),
                        store=k8s_backend.store, backend=k8s_backend)
    _wait(lambda: "line 19" in run.logs(0), 60, "the first 20 lines were not copied")
    run.stop_watching()
    stop_mirrors()  # the kernel is culled: nobody copies the next 130 lines before the kubelet rotates them
    go.touch()
    _wait(lambda: _job_done(cluster), 60, "the Job did not finish")

    again = attach(run.id, store=Store(home))
    assert again.wait(timeout=60) is RunState.SUCCEEDED
    assert again.result() == 42  # the result event was among the lines still kept
    copied = [int(line.split()[1]) for line in again.logs(0).splitlines() if line.startswith("line ")]
    first_kept = copied[20]
    # every line copied once, in order: the 20 read before, then everything the kubelet still keeps (a count of
    # lines from the start would skip 20 of those too)
    assert copied == list(range(20)) + list(range(first_kept, 150)), copied
    assert 20 < first_kept < 120
    again.sync()
    assert any("rotated the log of pod" in n and "is lost" in n for n in again.view.notices), again.view.notices
    resumed = [q for _, q in cluster.server.log_requests if q.get("sinceTime")]
    assert resumed and all(q.get("timestamps") == "true" for _, q in cluster.server.log_requests)


PSA = ('violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "init-pytorch" must '
       'set securityContext.allowPrivilegeEscalation=false)')


@pytest.mark.parametrize(("flavor", "reason"), [("job", "FailedCreate"), ("pytorchjob", "FailedCreatePod"),
                                                ("jobset", "FailedCreate")])
def test_pods_an_admission_refuses_end_the_run_with_the_apis_reason_whoever_creates_them(
    cluster: FakeCluster, k8s_backend: Any, flavor: str, reason: str,
) -> None:
    cluster.pod_admission = PSA  # the namespace enforces restricted Pod Security; the pods break it
    cluster.store.crds.update({"pytorchjobs.kubeflow.org", "jobsets.jobset.x-k8s.io"})
    bundle = capture_cell("1 + 1\n", {"__name__": "__main__"})
    run = submit_bundle(bundle, JobSpec(name=f"psa-{flavor}", nodes=2, backend="kubernetes", device="cpu", flavor=flavor),
                        store=k8s_backend.store, backend=k8s_backend)
    with pytest.raises(RunFailedError, match=r"could not create its pods"):
        run.wait(timeout=90)  # not "starting" until --timeout
    assert run.status() is RunState.FAILED
    status = k8s_backend.status(run.handle)
    assert status.failure is not None and f"could not create its pods ({reason})" in status.failure.reason
    assert PSA in status.failure.reason
    run.sync()
    assert any(n.startswith(f"{reason}: Error creating") for n in run.view.notices)
    name = k8s_backend._target(run.handle).name
    plural = {"job": "jobs.batch", "pytorchjob": "pytorchjobs.kubeflow.org", "jobset": "jobsets.jobset.x-k8s.io"}[flavor]
    assert (plural, name, "Foreground") in cluster.server.deletes  # the workload does not keep retrying


def test_a_stock_image_without_accelerate_fails_naming_what_is_missing_and_the_image(
    cluster: FakeCluster, k8s_backend: Any,
) -> None:
    cluster.image_lacks["python:3.11"] = {"accelerate"}
    bundle = capture_cell("6 * 7\n", {"__name__": "__main__"})
    run = submit_bundle(bundle, JobSpec(name="stock", nodes=2, backend="kubernetes", device="cpu", image="python:3.11"),
                        store=k8s_backend.store, backend=k8s_backend)
    with pytest.raises(RunFailedError) as caught:
        run.wait(timeout=90)
    failure = caught.value.failure
    assert failure is not None
    assert "the image python:3.11 lacks the Python package accelerate" in failure.reason, failure
    assert "pip install accelerate" in failure.reason and "--image" in failure.reason
    assert failure.last_lines  # the pod's own output, not "exit code 1" with no lines


def test_when_ranks_printed_nothing_the_failure_shows_the_pods_own_output(cluster: FakeCluster, k8s_backend: Any) -> None:
    # past the preflight (torch and accelerate are there), the launcher itself dies before any rank starts: a
    # dependency of Accelerate is missing
    cluster.image_lacks["registry.example/broken:1"] = {"yaml"}
    bundle = capture_cell("6 * 7\n", {"__name__": "__main__"})
    run = submit_bundle(bundle, JobSpec(name="broken", nodes=2, backend="kubernetes", device="cpu",
                                        image="registry.example/broken:1"), store=k8s_backend.store, backend=k8s_backend)
    with pytest.raises(RunFailedError) as caught:
        run.wait(timeout=90)
    failure = caught.value.failure
    assert failure is not None and any("No module named 'yaml'" in line for line in failure.last_lines), failure
    assert all(run.logs(rank) == "" for rank in range(2))  # no rank printed a line: the lines are the pod's


def test_a_success_the_api_showed_stays_succeeded_after_the_ttl_collects_the_job(
    cluster: FakeCluster, k8s_backend: Any, home: Path,
) -> None:
    # the notebook cannot list the pods for now (nothing is copied, no verdict is reached) but sees the Job
    cluster.server.deny("list", "pods")
    bundle = capture_cell("6 * 7\n", {"__name__": "__main__"})
    run = submit_bundle(bundle, JobSpec(name="gone", nodes=1, backend="kubernetes", device="cpu"),
                        store=k8s_backend.store, backend=k8s_backend)
    _wait(lambda: _job_done(cluster), 90, "the Job did not finish")
    root = k8s_backend.store.attempt_dir(run.id, 0)
    status = root / "status.json"
    _wait(lambda: status.exists() and '"succeeded"' in status.read_text() and '"workload"' in status.read_text(), 20,
          "the Job's outcome was not kept in the store when the API showed it")
    run.stop_watching()
    stop_mirrors()  # the kernel is culled before the verdict
    assert not run.status().terminal
    name = k8s_backend._target(run.handle).name
    cluster.delete("jobs.batch", NAMESPACE, name, "Background")  # ttlSecondsAfterFinished ran out
    _wait(lambda: not cluster.store.items("pods", NAMESPACE) and not cluster.store.items("jobs.batch", NAMESPACE), 20,
          "the Job and its pods were not collected")
    cluster.server.denied.clear()

    again = attach(run.id, store=Store(home))
    assert again.wait(timeout=60) is RunState.SUCCEEDED  # not "deleted before it finished"
    again.sync()
    assert any("before nbtrain copied all of its pods' logs" in n for n in again.view.notices)


def test_a_job_collected_before_anyone_saw_it_end_is_an_unknown_outcome_naming_the_ttl(
    cluster: FakeCluster, k8s_backend: Any, home: Path,
) -> None:
    # the notebook sees neither the pods nor the Job: nothing is copied and no outcome is kept before it is culled
    for resource in ("pods", "jobs.batch"):
        cluster.server.deny("list", resource)
    bundle = capture_cell("6 * 7\n", {"__name__": "__main__"})
    run = submit_bundle(bundle, JobSpec(name="unseen", nodes=1, backend="kubernetes", device="cpu"),
                        store=k8s_backend.store, backend=k8s_backend)
    _wait(lambda: _job_done(cluster), 90, "the Job did not finish")
    run.stop_watching()
    stop_mirrors()
    cluster.delete("jobs.batch", NAMESPACE, k8s_backend._target(run.handle).name, "Background")  # the TTL ran out
    _wait(lambda: not cluster.store.items("pods", NAMESPACE) and not cluster.store.items("jobs.batch", NAMESPACE), 20,
          "the Job and its pods were not collected")
    cluster.server.denied.clear()

    again = attach(run.id, store=Store(home))
    with pytest.raises(RunFailedError) as caught:
        again.wait(timeout=60)
    text = str(caught.value)
    assert "the outcome is unknown" in text and "ttlSecondsAfterFinished, 604800 s" in text
    assert "0 of 1 ranks had reported done" in text and "NBTRAIN_K8S_TTL" in text


def test_the_default_ttl_keeps_a_finished_job_for_a_week(k8s_backend: Any) -> None:
    bundle = capture_cell("6 * 7\n", {"__name__": "__main__"})
    directory = bundle.write(k8s_backend.store.bundles)
    plan = k8s_backend.plan(JobSpec(backend="kubernetes", device="cpu"), str(directory), bundle.digest, "ttl-0a1b2c")
    assert plan.request.objects[0]["spec"]["ttlSecondsAfterFinished"] == 7 * 24 * 3600


def test_a_queue_that_does_not_exist_is_refused_before_anything_is_submitted(
    cluster: FakeCluster, run_cell: Any,
) -> None:
    from IPython.core.error import UsageError

    with pytest.raises(UsageError) as caught:  # no Kueue at all
        run_cell("%%distributed --backend kubernetes --name noq --queue team-a\n1 + 1\n")
    assert "this cluster has no Kueue" in str(caught.value) and "nothing was submitted" in str(caught.value)
    cluster.add_local_queue(NAMESPACE, "team-b")
    with pytest.raises(UsageError) as caught:  # Kueue, but not that queue: it would wait "for Kueue" forever
        run_cell("%%distributed --backend kubernetes --name noq --queue team-a\n1 + 1\n")
    text = str(caught.value)
    assert "no Kueue LocalQueue 'team-a' in namespace 'nbtrain-test'" in text and "LocalQueues there: team-b" in text
    assert "drop --queue" in text
    assert cluster.store.items("jobs.batch", NAMESPACE) == [] and cluster.store.items("configmaps", NAMESPACE) == []


def test_a_container_that_cannot_start_fails_the_run_naming_the_pod_and_the_start_error(
    cluster: FakeCluster, home: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the image has no interpreter where NBTRAIN_K8S_PYTHON says: the runtime cannot exec the container's command,
    # and with restartPolicy Never the kubelet fails the pod (StartError, exit code 128) instead of retrying
    from nbtrain.backends.kubernetes import KubernetesBackend

    monkeypatch.setenv("NBTRAIN_K8S_PYTHON", "/opt/no-such-python/bin/python3")
    backend = KubernetesBackend(Store(home))
    bundle = capture_cell("6 * 7\n", {"__name__": "__main__"})
    started = time.monotonic()
    run = submit_bundle(bundle, JobSpec(name="nostart", nodes=2, backend="kubernetes", device="cpu"),
                        store=backend.store, backend=backend)
    with pytest.raises(RunFailedError) as caught:
        run.wait(timeout=60, progress=False)
    took = time.monotonic() - started
    assert took < 15, f"the run took {took:.0f} s to fail: a pod that cannot start fails it at once (its log is empty)"
    failure = caught.value.failure
    assert failure is not None, str(caught.value)
    job = backend._target(run.handle).name
    assert f"pod {job}-" in failure.reason, f"the verdict names no pod of Job {job}: {failure.reason}"
    assert failure.rank in (0, 1), failure
    assert "StartError" in failure.reason and "128" in failure.reason, failure.reason
    assert "/opt/no-such-python/bin/python3" in failure.reason, f"the kubelet's reason is left out: {failure.reason}"
    pods = cluster.store.items("pods", NAMESPACE)
    assert not [p for p in pods if p["status"]["phase"] in ("Pending", "Running")], "a pod of the failed run still runs"
    assert not [uid for uid, rt in cluster.runtimes.items() if rt.process is not None and rt.process.poll() is None]


def test_cancel_after_the_verdict_deletes_a_workload_the_mirror_could_not(cluster: FakeCluster, k8s_backend: Any) -> None:
    cluster.server.deny("delete", "jobs.batch")  # the mirror's own delete of the failed gang is refused (403)
    bundle = capture_cell("import os, time\nif os.environ['RANK'] == '1':\n    raise ValueError('rank one is broken')\n"
                          "time.sleep(600)\n", {"__name__": "__main__"})
    run = submit_bundle(bundle, JobSpec(name="leftover", backend="kubernetes", device="cpu", nodes=2),
                        store=k8s_backend.store, backend=k8s_backend)
    with pytest.raises(RunFailedError, match="rank one is broken"):
        run.wait(timeout=120, progress=False)
    name = k8s_backend._target(run.handle).name
    assert [j["metadata"]["name"] for j in cluster.store.items("jobs.batch", NAMESPACE)] == [name]  # left behind
    cluster.server.denied.discard(("delete", "jobs.batch"))
    deletes = len(cluster.server.deletes)
    run.cancel()
    assert cluster.server.deletes[deletes:] == [("jobs.batch", name, "Foreground")]
    assert cluster.store.items("pods", NAMESPACE) == []
    _wait(lambda: not cluster.store.items("jobs.batch", NAMESPACE), 15, "the Job outlived its foreground delete")
    assert k8s_backend.status(run.handle).state is RunState.FAILED  # the verdict stays
    notices = [e.data["message"] for e in k8s_backend.events(run.handle) if e.source == "kubernetes-cancel"]
    assert len(notices) == 1 and f"deleted the Job {name}" in notices[0]
    run.cancel()  # idempotent: nothing left, nothing deleted
    assert len(cluster.server.deletes) == deletes + 1
