"""The Kubernetes backend end to end against the fake API server: gangs, failures, cancel, attach."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from fake_cluster import NAMESPACE, FakeCluster

from nbtrain.backends.kubernetes import rbac_manifests
from nbtrain.errors import RunFailedError
from nbtrain.model import RunState

pytestmark = pytest.mark.slow

SETUP = """
import nbtrain
import torch as T
from accelerate import Accelerator
STEPS = 5
"""

SYNC = """%%distributed --backend kubernetes --nodes 2 --gpus 1 --name sync --out run
accelerator = Accelerator()
T.manual_seed(0)
model = T.nn.Linear(4, 1)
opt = T.optim.SGD(model.parameters(), lr=0.1)
model, opt = accelerator.prepare(model, opt)
for step in range(STEPS):
    g = T.Generator().manual_seed(100 * accelerator.process_index + step)
    x = T.randn(8, 4, generator=g)
    loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
    accelerator.backward(loss)
    opt.step()
    opt.zero_grad()
    accelerator.log({"loss": accelerator.reduce(loss.detach(), "mean").item()}, step=step)
checksum = sum(p.sum().item() for p in model.parameters())
print(f"rank {accelerator.process_index} checksum={checksum:.10f}", flush=True)
print("runtime from", nbtrain.__file__, flush=True)
checksum
"""


def test_a_two_pod_gang_trains_in_sync_and_succeeds_with_only_the_shipped_role(
    cluster: FakeCluster, run_cell: Any, shell: Any,
) -> None:
    role = rbac_manifests(NAMESPACE, "notebook")[0]
    cluster.server.rbac_rules = role["rules"]  # every request nbtrain makes must be allowed by the shipped Role
    run_cell(SETUP)
    run_cell(SYNC)
    run = shell.user_ns["run"]
    assert run.wait(timeout=120) is RunState.SUCCEEDED
    logs = [run.logs(rank) for rank in range(2)]
    sums = [re.search(r"checksum=(\S+)", text).group(1) for text in logs]  # type: ignore[union-attr]
    assert sums[0] == sums[1], logs  # gradients were all-reduced: the ranks trained in sync
    assert abs(run.result() - float(sums[0])) < 1e-6
    assert [step for step, _ in run.metrics(0)["loss"]] == list(range(5))
    assert "/volumes/nbtrain/runtime/nbtrain/__init__.py" in logs[0]  # the runtime shipped in the ConfigMap ran
    assert "@@nbtrain-event@@" not in logs[0] + logs[1]
    forbidden = [r for r in cluster.server.requests if not any(
        r[1] in rule["apiGroups"] and r[2] in rule["resources"] and r[0] in rule["verbs"] for rule in role["rules"])]
    assert not forbidden
    assert {(verb, resource) for verb, _, resource, _ in cluster.server.requests} >= {
        ("create", "jobs"), ("watch", "pods"), ("watch", "jobs"), ("get", "pods/log"), ("create", "configmaps")}
    job = cluster.store.items("jobs.batch", NAMESPACE)[0]
    for kind in ("configmaps", "services"):
        (obj,) = cluster.store.items(kind, NAMESPACE)
        assert obj["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
        assert obj["metadata"]["labels"]["nbtrain.dev/run-id"] == run.id


FAIL = """%%distributed --backend kubernetes --nodes 2 --gpus 1 --name boom --out run
accelerator = Accelerator()
value = T.ones(1)
accelerator.wait_for_everyone()
if accelerator.process_index == 1:
    raise ValueError("rank one is broken")
accelerator.wait_for_everyone()
"""


def test_a_failing_rank_fails_the_job_and_the_failure_names_it(
    cluster: FakeCluster, run_cell: Any, shell: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NBTRAIN_K8S_LOG_STREAMS", "1")  # rank 0's pod holds the only stream: rank 1's is read when it fails
    run_cell(SETUP)
    run_cell(FAIL)
    run = shell.user_ns["run"]
    with pytest.raises(RunFailedError, match=r"rank 1 \(node 1\) failed: ValueError: rank one is broken \(cell line 6\)") as caught:
        run.wait(timeout=120, progress=False)
    assert "Traceback" in str(caught.value)
    assert run.view.failure is not None and run.view.failure.rank == 1  # what the monitor shows
    (job,) = cluster.store.items("jobs.batch", NAMESPACE)
    assert any(c["type"] == "Failed" and c["reason"] == "PodFailurePolicy" for c in job["status"]["conditions"])
    assert "FAILED: rank 1 (node 1) failed: ValueError" in run.summary()
    assert "rank one is broken" in run.logs(1)


LONG = """%%distributed --backend kubernetes --nodes 2 --gpus 1 --name long --out run
import time
accelerator = Accelerator()
for i in range(600):
    print(f"tick {i}", flush=True)
    time.sleep(0.1)
"""


def test_cancel_deletes_with_propagation_and_leaves_no_process(
    cluster: FakeCluster, run_cell: Any, shell: Any, survivors: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NBTRAIN_K8S_LOG_STREAMS", "1")  # the bound on followed logs: rank 0 first
    run_cell(SETUP)
    run_cell(LONG)
    run = shell.user_ns["run"]
    deadline = time.monotonic() + 60
    while "tick 3" not in run.logs(0) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert run.status() is RunState.RUNNING
    # the bound holds once the followers settle: rank 0's pod is the one followed stream (when node 1's pod started
    # first, its stream is preempted and may overlap rank 0's for a moment: who closes first is not the contract)
    rank0 = _pod_of_node(cluster, 0)
    deadline = time.monotonic() + 30
    while cluster.server.log_streams_open() != [rank0] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cluster.server.log_streams_open() == [rank0], "NBTRAIN_K8S_LOG_STREAMS=1: only rank 0's log is followed"
    run.cancel()
    assert run.status() is RunState.CANCELLED
    assert survivors() == []
    deadline = time.monotonic() + 30  # no followed log outlives the run (the fake ends a deleted pod's stream)
    while cluster.server.log_streams_open() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cluster.server.log_streams_open() == []
    assert ("jobs.batch", run.backend._target(run.handle).name, "Foreground") in cluster.server.deletes
    assert cluster.store.items("pods", NAMESPACE) == []
    assert cluster.store.items("configmaps", NAMESPACE) == [] and cluster.store.items("services", NAMESPACE) == []
    run.cancel()  # idempotent


def _pod_of_node(cluster: FakeCluster, node: int) -> str:
    """The name of the running pod of job completion index ``node`` (waits for it to exist)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for pod in cluster.store.items("pods", NAMESPACE):
            meta = pod["metadata"]
            if meta.get("annotations", {}).get("batch.kubernetes.io/job-completion-index") == str(node):
                return str(meta["name"])
        time.sleep(0.1)
    raise AssertionError(f"no pod of node {node} in {NAMESPACE}")


COUNT = """%%distributed --backend kubernetes --nodes 2 --gpus 1 --name count --out run
import time
accelerator = Accelerator()
for i in range(N):
    print(f"line {i:04d} of rank {accelerator.process_index}", flush=True)
    if i % 20 == 0:
        nbtrain.log(step=i, i=float(i))
        time.sleep(0.05)
"""


def test_broken_watches_and_log_streams_resume_without_losing_or_repeating_lines(
    cluster: FakeCluster, run_cell: Any, shell: Any,
) -> None:
    run_cell(SETUP + "\nN = 400\n")
    run_cell(COUNT)
    run = shell.user_ns["run"]
    broken = 0
    deadline = time.monotonic() + 90
    tick = 0
    while not run.status().terminal and time.monotonic() < deadline:
        # a change no pod watch sees moves the store's version past every watch's last-seen version, so
        # after compaction every resumed watch starts with 410 Gone (without it, a watch that saw the
        # newest change resumes fine and the re-list is left to timing)
        tick += 1
        cluster.store.create("configmaps", NAMESPACE, {"apiVersion": "v1", "kind": "ConfigMap",
                                                       "metadata": {"name": f"bump-{tick}"}})
        cluster.server.compact()
        broken += cluster.server.break_streams()
        time.sleep(0.3)
    assert run.wait(timeout=60) is RunState.SUCCEEDED
    assert broken >= 4
    for rank in range(2):
        lines = [line for line in run.logs(rank).splitlines() if line.startswith("line ")]
        assert lines == [f"line {i:04d} of rank {rank}" for i in range(400)]
    events = list(run.events())
    keys = [e.key for e in events]
    assert len(keys) == len(set(keys))
    assert [step for step, _ in run.metrics(1)["i"]] == list(range(0, 400, 20))
    relists = [r for r in cluster.server.requests if r[0] == "list" and r[2] == "pods"]
    assert len(relists) >= 2  # 410 Gone made the pod watch list again


QUICK = """%%distributed --backend kubernetes --nodes 1 --gpus 1 --name quick --out run --queue team-a
accelerator = Accelerator()
accelerator.process_index + 40
"""


def test_a_queued_job_shows_as_queued_and_runs_when_admitted(cluster: FakeCluster, run_cell: Any, shell: Any) -> None:
    cluster.add_local_queue(NAMESPACE, "team-a")
    run_cell(SETUP)
    run_cell(QUICK)
    run = shell.user_ns["run"]
    (job,) = cluster.store.items("jobs.batch", NAMESPACE)
    assert job["spec"]["suspend"] is True and job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    deadline = time.monotonic() + 10
    while run.status() is not RunState.QUEUED and time.monotonic() < deadline:
        time.sleep(0.1)
    status = run.backend.status(run.handle)
    assert status.state is RunState.QUEUED and "Kueue" in status.detail and "team-a" in status.detail
    time.sleep(1.0)
    assert cluster.store.items("pods", NAMESPACE) == []  # nothing starts before admission
    cluster.admit(NAMESPACE, job["metadata"]["name"])
    assert run.wait(timeout=60) is RunState.SUCCEEDED
    assert run.result() == 40
    states = [e.data["state"] for e in run.events() if e.kind.value == "state"]
    assert states[:2] == ["starting", "queued"] and states[-1] == "succeeded" and "running" in states


def test_unschedulable_image_pull_and_quota_problems_are_shown_while_pods_wait(cluster: FakeCluster, k8s_backend: Any,
                                                                          tmp_path: Path) -> None:
    from nbtrain.bundle import capture_cell
    from nbtrain.client import submit_bundle
    from nbtrain.spec import JobSpec

    bundle = capture_cell("1 + 1\n", {"__name__": "__main__"})
    cluster.unschedulable = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    run = submit_bundle(bundle, JobSpec(name="wait", backend="kubernetes"), store=k8s_backend.store, backend=k8s_backend)
    deadline = time.monotonic() + 10
    while run.status() is not RunState.QUEUED and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "Insufficient nvidia.com/gpu" in k8s_backend.status(run.handle).detail
    run.cancel()
    cluster.unschedulable = None
    run = submit_bundle(bundle, JobSpec(name="pull", backend="kubernetes", image="missing/image:1"),
                        store=k8s_backend.store, backend=k8s_backend)
    deadline = time.monotonic() + 10
    while not any("ImagePullBackOff" in n for n in run.view.notices) and time.monotonic() < deadline:
        run.sync()
        time.sleep(0.1)
    assert any("ImagePullBackOff" in n and "missing/image:1" in n for n in run.view.notices)
    assert run.status() is RunState.STARTING
    run.cancel()
    assert run.status() is RunState.CANCELLED

    quota = "exceeded quota: gpu-quota, requested: nvidia.com/gpu=1, used: 4, limited: 4"
    cluster.pod_quota = quota  # pods that cannot even be created only show up as Events of the Job
    run = submit_bundle(bundle, JobSpec(name="quota", backend="kubernetes"), store=k8s_backend.store, backend=k8s_backend)
    deadline = time.monotonic() + 20
    while not any(quota in n for n in run.view.notices) and time.monotonic() < deadline:
        run.sync()
        time.sleep(0.2)
    assert any(n.startswith("FailedCreate: Error creating") and quota in n for n in run.view.notices)
    assert quota in k8s_backend.status(run.handle).detail
    run.cancel()


def test_dry_run_prints_the_manifests_and_creates_nothing(cluster: FakeCluster, run_cell: Any,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    run_cell(SETUP)
    run_cell("%%distributed --backend kubernetes --dry-run --nodes 2 --gpus 4 --device gpu --name plan\n"
             "accelerator = Accelerator()\n")
    out = capsys.readouterr().out
    assert "kind: Job" in out and "kind: Service" in out and "kind: ConfigMap" in out
    assert "nvidia.com/gpu: '4'" in out and f"namespace: {NAMESPACE}" in out
    assert cluster.server.requests == []
