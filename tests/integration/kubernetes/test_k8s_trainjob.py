"""--flavor trainjob end to end on the fake cluster, whose Kubeflow Trainer stand-in (fake_trainer.py) makes each
TrainJob's pods from the runtime it names: a 2-node gang trains and succeeds with only the shipped Role, a failing rank
is named, a run past --timeout says so, and a cluster without Trainer (or without the runtime) is refused with the fix.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_cluster import NAMESPACE, FakeCluster
from fake_trainer import RESOURCE as TRAINJOBS

from nbtrain.backends.kubernetes import rbac_manifests
from nbtrain.backends.kubernetes.trainjob import gang_runtime
from nbtrain.bundle import capture_cell
from nbtrain.client import submit_bundle
from nbtrain.errors import NbtrainError, RunFailedError
from nbtrain.model import RunState
from nbtrain.spec import JobSpec

pytestmark = pytest.mark.slow

#: Trainer's stock torch runtime (see the file's header)
STOCK = yaml.safe_load((Path(__file__).parents[2] / "data" / "trainer-torch-distributed-runtime.yaml").read_text())

SETUP = """
import torch as T
from accelerate import Accelerator
"""

SYNC = """%%distributed --backend kubernetes --flavor trainjob --nodes 2 --gpus 1 --name tj-sync --out run
accelerator = Accelerator()
total = accelerator.reduce(T.ones(1) * (accelerator.process_index + 1), "sum").item()
accelerator.log({"total": total}, step=0)
print(f"rank {accelerator.process_index} of {accelerator.num_processes} total={total}", flush=True)
total
"""

FAIL = """%%distributed --backend kubernetes --flavor trainjob --nodes 2 --gpus 1 --name tj-boom --out run
accelerator = Accelerator()
accelerator.wait_for_everyone()
if accelerator.process_index == 1:
    raise ValueError("rank one is broken")
accelerator.wait_for_everyone()
"""


def test_a_two_node_trainjob_trains_and_succeeds_with_only_the_shipped_role(
    cluster: FakeCluster, run_cell: Any, shell: Any,
) -> None:
    cluster.trainer.add_runtime(STOCK)  # the default runtime, torch-distributed
    role = rbac_manifests(NAMESPACE, "notebook")[0]
    cluster.server.rbac_rules = role["rules"]
    run_cell(SETUP)
    run_cell(SYNC)
    run = shell.user_ns["run"]
    assert run.wait(timeout=120) is RunState.SUCCEEDED
    assert run.result() == 3.0  # 1 + 2: the two nodes' ranks all-reduced through Trainer's rendezvous address
    logs = [run.logs(rank) for rank in range(2)]
    assert "rank 0 of 2 total=3.0" in logs[0] and "rank 1 of 2 total=3.0" in logs[1], logs
    assert run.metrics(0)["total"] == [(0, 3.0)]
    (train,) = cluster.store.items(TRAINJOBS, NAMESPACE)
    assert [c["reason"] for c in train["status"]["conditions"] if c["type"] == "Complete"] == ["AllJobsCompleted"]
    pods = cluster.store.items("pods", NAMESPACE)
    assert sorted(p["spec"]["hostname"] for p in pods) == [f"{train['metadata']['name']}-node-0-{i}" for i in (0, 1)]
    assert all(p["metadata"]["labels"]["nbtrain.dev/run-id"] == run.id for p in pods)
    assert all(p["spec"]["containers"][0]["name"] == "node" for p in pods)
    for kind in ("configmaps", "secrets"):
        (obj,) = cluster.store.items(kind, NAMESPACE)
        assert obj["metadata"]["ownerReferences"][0]["uid"] == train["metadata"]["uid"]
    forbidden = [r for r in cluster.server.requests if not any(
        r[1] in rule["apiGroups"] and r[2] in rule["resources"] and r[0] in rule["verbs"] for rule in role["rules"])]
    assert not forbidden
    assert ("create", "trainer.kubeflow.org", "trainjobs") in {r[:3] for r in cluster.server.requests}


def test_a_failing_rank_fails_the_trainjob_and_the_failure_names_it(
    cluster: FakeCluster, run_cell: Any, shell: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster.trainer.add_runtime(gang_runtime())
    monkeypatch.setenv("NBTRAIN_K8S_TRAINJOB_RUNTIME", "nbtrain-torch")
    run_cell(SETUP)
    run_cell(FAIL)
    run = shell.user_ns["run"]
    with pytest.raises(RunFailedError, match=r"rank 1 \(node 1\) failed: ValueError: rank one is broken"):
        run.wait(timeout=120, progress=False)
    assert "rank one is broken" in run.logs(1)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and cluster.store.items("pods", NAMESPACE) and not [
            p for p in cluster.store.items("pods", NAMESPACE) if p["status"].get("phase") == "Failed"]:
        time.sleep(0.2)
    trains = cluster.store.items(TRAINJOBS, NAMESPACE)
    if trains:  # the runtime's podFailurePolicy failed the Job, and Trainer the TrainJob (unless nbtrain ended it first)
        reasons = {c["reason"] for c in trains[0].get("status", {}).get("conditions", []) if c["type"] == "Failed"}
        assert reasons <= {"ReachedMaxRestarts"}, reasons  # the JobSet's failurePolicy (maxRestarts 0), copied


def test_a_trainjob_past_its_timeout_fails_saying_it_exceeded_timeout(cluster: FakeCluster, k8s_backend: Any) -> None:
    cluster.trainer.add_runtime(STOCK)
    code = "import time\nprint('working', flush=True)\ntime.sleep(600)\n"
    run = submit_bundle(capture_cell(code, {"__name__": "__main__"}),
                        JobSpec(name="tj-slow", nodes=2, backend="kubernetes", device="cpu", flavor="trainjob",
                                timeout_s=4),
                        store=k8s_backend.store, backend=k8s_backend)
    assert run.wait(timeout=120, raise_on_failure=False, progress=False) is RunState.FAILED
    assert run.failure is not None
    reason = run.failure.reason
    assert "exceeded --timeout 4 s" in reason and "DeadlineExceeded" in reason, reason
    assert "TrainJob exceeded its active deadline" in reason, reason
    deadline = time.monotonic() + 30
    while cluster.store.items("pods", NAMESPACE) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not cluster.store.items("pods", NAMESPACE), "pods of a TrainJob past its deadline were left running"


def test_a_cluster_without_trainer_or_its_runtime_is_refused_with_the_fix(cluster: FakeCluster, k8s_backend: Any) -> None:
    spec = JobSpec(name="tj-none", nodes=2, backend="kubernetes", device="cpu", flavor="trainjob")
    bundle = capture_cell("6 * 7\n", {"__name__": "__main__"})
    with pytest.raises(NbtrainError) as caught:
        submit_bundle(bundle, spec, store=k8s_backend.store, backend=k8s_backend)
    text = str(caught.value)
    assert "trainjobs.trainer.kubeflow.org" in text and "--flavor job" in text and "Kubeflow Trainer" in text, text
    cluster.trainer.add_runtime(gang_runtime())  # Trainer installed, but not the runtime nbtrain names by default
    with pytest.raises(NbtrainError) as caught:
        submit_bundle(bundle, spec, store=k8s_backend.store, backend=k8s_backend)
    assert re.search(r'clustertrainingruntimes.trainer.kubeflow.org "torch-distributed" not found', str(caught.value)), \
        str(caught.value)
    assert cluster.store.items(TRAINJOBS, NAMESPACE) == [] and cluster.store.items("secrets", NAMESPACE) == []


def test_cancel_deletes_the_trainjob_and_every_pod_goes(cluster: FakeCluster, k8s_backend: Any, survivors: Any) -> None:
    cluster.trainer.add_runtime(STOCK)
    code = "import time\nfor i in range(600):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.1)\n"
    run = submit_bundle(capture_cell(code, {"__name__": "__main__"}),
                        JobSpec(name="tj-long", nodes=2, backend="kubernetes", device="cpu", flavor="trainjob"),
                        store=k8s_backend.store, backend=k8s_backend)
    deadline = time.monotonic() + 60
    while "tick 3" not in run.logs(0) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert run.status() is RunState.RUNNING
    run.cancel()
    assert run.status() is RunState.CANCELLED
    name = run.backend._target(run.handle).name
    assert (TRAINJOBS, name, "Foreground") in cluster.server.deletes
    assert cluster.store.items("pods", NAMESPACE) == [] and cluster.store.items(TRAINJOBS, NAMESPACE) == []
    assert cluster.store.items("configmaps", NAMESPACE) == [] and cluster.store.items("secrets", NAMESPACE) == []
    assert survivors() == []


def test_a_trainjob_whose_jobset_trainer_cannot_make_says_why_while_it_waits(
    cluster: FakeCluster, k8s_backend: Any,
) -> None:
    cluster.trainer.add_runtime(STOCK)
    why = 'jobsets.jobset.x-k8s.io "tj-stuck" is forbidden: exceeded quota: team-a'
    cluster.trainer.resources_fail = why
    run = submit_bundle(capture_cell("6 * 7\n", {"__name__": "__main__"}),
                        JobSpec(name="tj-stuck", nodes=2, backend="kubernetes", device="cpu", flavor="trainjob"),
                        store=k8s_backend.store, backend=k8s_backend)
    deadline, detail = time.monotonic() + 30, ""
    while why not in detail and time.monotonic() < deadline:
        detail = k8s_backend.status(run.handle).detail
        time.sleep(0.2)
    assert why in detail and run.status() is RunState.STARTING, detail  # Trainer retries: shown, not final
    cluster.trainer.resources_fail = None  # fixed: Trainer's next try makes the JobSet, the run goes on
    assert run.wait(timeout=120, progress=False) is RunState.SUCCEEDED
    assert run.result() == 42


def test_a_volume_reaches_every_pod_and_a_failed_attempt_restarts_as_a_new_trainjob(
    cluster: FakeCluster, k8s_backend: Any,
) -> None:
    """--volume rides in the runtime patch (pod volumes, container mounts): both attempts' pods share the claim."""
    gang = gang_runtime()  # installed under the default runtime name, which the backend names
    cluster.trainer.add_runtime({**gang, "metadata": {**gang["metadata"], "name": "torch-distributed"}})
    shared = cluster.add_claim(NAMESPACE, "team-data")
    code = ("import os, pathlib\nshared = pathlib.Path(os.environ['SHARED'])\n"
            "attempt = os.environ['NBTRAIN_ATTEMPT']\n"
            "(shared / f\"attempt-{attempt}-rank-{os.environ['RANK']}\").write_text('hi')\n"
            "if attempt == '0':\n    raise RuntimeError('the first attempt fails')\n")
    run = submit_bundle(capture_cell(code, {"__name__": "__main__"}),
                        JobSpec(name="tj-vol", nodes=2, backend="kubernetes", device="cpu", flavor="trainjob",
                                env={"SHARED": "/shared"}, volumes=("team-data:/shared",), max_restarts=1),
                        store=k8s_backend.store, backend=k8s_backend)
    assert run.wait(timeout=180, progress=False) is RunState.SUCCEEDED
    assert sorted(p.name for p in shared.iterdir() if p.is_file()) == [
        "attempt-0-rank-0", "attempt-0-rank-1", "attempt-1-rank-0", "attempt-1-rank-1"]
    assert [a["attempt"] for a in run.attempts()] == [0, 1]
    names = sorted(t["metadata"]["name"] for t in cluster.store.items(TRAINJOBS, NAMESPACE))
    assert names[-1].endswith("-a1"), names
