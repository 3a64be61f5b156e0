"""--flavor trainjob (Kubeflow Trainer v2): the TrainJob matches Trainer's CRD (strict), the pod Trainer makes of it
(through the fake Trainer's merge, tests/integration/kubernetes/fake_trainer.py) is nbtrain's pod and meets the
restricted profile, names fit, what a TrainJob cannot carry is refused by name, and the TrainJob's endings read as the
other flavors' do."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from k8s_unit_helpers import crd_schema
from test_manifests import full_spec, k8s_versions
from test_openshift import restricted_violations

from nbtrain.backends.base import Plan
from nbtrain.backends.kubernetes import KubeOptions
from nbtrain.backends.kubernetes.names import LABEL_ATTEMPT, LABEL_RUN_ID, is_dns_label, object_names
from nbtrain.backends.kubernetes.podstate import deadline_reason, owner_state
from nbtrain.backends.kubernetes.trainjob import PATCH_MANAGER, gang_runtime, runtime_ref
from nbtrain.errors import SpecError
from nbtrain.model import RunState

MakePlan = Callable[..., Plan]
FAKES = Path(__file__).resolve().parents[2] / "integration" / "kubernetes"
TRAINJOB = ("trainer-trainjobs.yaml", "v1alpha1")
#: Trainer's stock torch runtime (see the file's header)
STOCK = yaml.safe_load((Path(__file__).parents[2] / "data" / "trainer-torch-distributed-runtime.yaml").read_text())


def _fake_trainer() -> ModuleType:
    """fake_trainer.py (standard library and fake_apiserver only), loaded by path."""
    if "fake_trainer" not in sys.modules:
        for name in ("fake_apiserver", "fake_trainer"):
            spec = importlib.util.spec_from_file_location(name, FAKES / f"{name}.py")
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
    return sys.modules["fake_trainer"]


def trainjob_spec(**overrides: Any) -> dict[str, Any]:
    """Every knob of test_manifests.full_spec that a TrainJob carries (--priority-class it refuses)."""
    return full_spec(**{"priority_class": None, **overrides})


def materialised(plan: Plan, runtime: dict[str, Any] = STOCK) -> dict[str, Any]:
    """The child Job Trainer (and JobSet) would make of the plan's TrainJob on ``runtime``."""
    fake = _fake_trainer()
    store = sys.modules["fake_apiserver"].Store()
    trainer = fake.FakeTrainer(SimpleNamespace(store=store))
    workload = yaml.safe_load(yaml.safe_dump(plan.request.objects[0]))
    trainer.add_runtime({**runtime, "metadata": {**runtime["metadata"], "name": workload["spec"]["runtimeRef"]["name"]}})
    trainer.validate("nbtrain-test", workload)  # the webhook admits it
    workload["metadata"].update(uid="uid-1", namespace="nbtrain-test")
    job: dict[str, Any] = trainer._job(workload)
    return job


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
def test_the_trainjob_matches_trainers_crd_with_unknown_fields_rejected(make_plan: MakePlan, gpu: bool) -> None:
    workload, secret, configmap = make_plan(flavor="trainjob", **trainjob_spec(device="gpu" if gpu else "cpu")).request.objects
    assert (workload["apiVersion"], workload["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert (secret["kind"], configmap["kind"]) == ("Secret", "ConfigMap")
    jsonschema.validate(workload, crd_schema(*TRAINJOB))
    broken = yaml.safe_load(yaml.safe_dump(workload))
    broken["spec"]["trainer"]["workingDir"] = "/tmp"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, crd_schema(*TRAINJOB))
    spec = workload["spec"]
    assert spec["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                                  "name": "torch-distributed"}
    assert (spec["trainer"]["numNodes"], spec["trainer"]["numProcPerNode"]) == (3, 8)
    assert spec["activeDeadlineSeconds"] == 3601 and spec["suspend"] is True  # --timeout 3600.5; --queue
    assert workload["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert [p["manager"] for p in spec["runtimePatches"]] == [PATCH_MANAGER]
    if gpu:
        assert spec["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "8"


def test_the_runtimes_match_trainers_runtime_crd() -> None:
    for runtime in (gang_runtime(), STOCK):
        jsonschema.validate(runtime, crd_schema("trainer-clustertrainingruntimes.yaml", "v1alpha1"))
    job = gang_runtime()["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["backoffLimit"] == 0 and job["podFailurePolicy"]["rules"][0]["onExitCodes"]["containerName"] == "node"


@pytest.mark.parametrize("runtime", [STOCK, gang_runtime()], ids=["torch-distributed", "nbtrain-torch"])
def test_the_pods_trainer_makes_are_nbtrains_restricted_pods(make_plan: MakePlan, runtime: dict[str, Any]) -> None:
    plan = make_plan(flavor="trainjob", **trainjob_spec())
    job = materialised(plan, runtime)
    for version in k8s_versions():
        kubernetes_validate.validate(job, version, strict=True)
    pod = job["spec"]["template"]
    assert restricted_violations(pod["spec"]) == []
    assert pod["metadata"]["labels"][LABEL_RUN_ID] == "digits-3fa9c2" and pod["metadata"]["labels"][LABEL_ATTEMPT] == "0"
    assert pod["metadata"]["labels"]["cost-center"] == "ml-42"  # --label reaches the pods
    assert pod["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NBTRAIN_EVENT_KEY"]["valueFrom"]["secretKeyRef"]["optional"] is True
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "hf-credentials", "key": "token"}
    names = object_names("digits-3fa9c2", flavor="trainjob", nodes=3)
    assert env["PET_MASTER_ADDR"]["value"] == names.main_address == "digits-3fa9c2-node-0-0.digits-3fa9c2"
    assert f"--main_process_ip={names.main_address}" in container["args"] or names.main_address in " ".join(
        container["args"])
    assert container["command"][container["command"].index("--cwd") + 1] == "/tmp"  # no workingDir in a TrainJob
    assert {m["mountPath"] for m in container["volumeMounts"]} >= {"/data", "/cache/hf", "/tmp", "/dev/shm"}
    claims = {v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v}
    assert claims == {"training-data", "hf-cache.team-a"}
    assert pod["spec"]["serviceAccountName"] == "trainer" and pod["spec"]["imagePullSecrets"] == [
        {"name": "registry-creds"}]
    assert pod["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu" and pod["spec"]["subdomain"] == "digits-3fa9c2"
    assert job["spec"]["completions"] == 3 and job["metadata"]["name"] == "digits-3fa9c2-node-0"


def test_names_fit_and_rank_zero_is_trainers_master_address() -> None:
    names = object_names("a-very-long-notebook-name-that-goes-on-and-on-3fa9c2", flavor="trainjob", nodes=128)
    assert all(is_dns_label(n) for n in names.all)
    assert names.hostnames[0] == f"{names.base}-node-0-0" and names.hostnames[-1] == f"{names.base}-node-0-127"
    assert names.main_address == f"{names.base}-node-0-0.{names.base}"


@pytest.mark.parametrize(("fields", "said"), [
    ({"priority_class": "high"}, "--priority-class"),
    ({"env": {"PET_NNODES": "2"}}, "--env PET_NNODES"),
])
def test_what_a_trainjob_cannot_carry_is_refused_by_name(make_plan: MakePlan, fields: dict[str, Any], said: str) -> None:
    with pytest.raises(SpecError, match=said):
        make_plan(flavor="trainjob", nodes=2, device="cpu", **fields)


def test_the_runtime_setting_names_a_cluster_or_namespaced_runtime(make_plan: MakePlan) -> None:
    assert runtime_ref("nbtrain-torch").as_field()["kind"] == "ClusterTrainingRuntime"
    assert runtime_ref("TrainingRuntime/team-torch").kind == "TrainingRuntime"
    for bad in ("Runtime/x", "UPPER", "", "TrainingRuntime/"):
        with pytest.raises(SpecError, match="NBTRAIN_K8S_TRAINJOB_RUNTIME"):
            runtime_ref(bad)
    options = KubeOptions(image="ghcr.io/org/train:1", trainjob_runtime="TrainingRuntime/team-torch")
    plan = make_plan(flavor="trainjob", options=options, nodes=2, device="cpu")
    assert plan.request.objects[0]["spec"]["runtimeRef"]["name"] == "team-torch"
    assert any("kubectl delete trainjob" in n for n in plan.notices)  # no TTL on a TrainJob: said
    assert KubeOptions.from_env({"NBTRAIN_K8S_TRAINJOB_RUNTIME": "nbtrain-torch"}).trainjob_runtime == "nbtrain-torch"


def _trainjob(*conditions: dict[str, str], suspend: bool = False) -> dict[str, Any]:
    return {"spec": {"suspend": suspend}, "status": {"conditions": [{"status": "True", **c} for c in conditions]}}


def test_a_trainjobs_conditions_read_like_every_flavors() -> None:
    done = owner_state(_trainjob({"type": "Complete", "reason": "AllJobsCompleted"}), "trainjob")
    assert done.outcome is RunState.SUCCEEDED
    failed = owner_state(_trainjob({"type": "Failed", "reason": "FailedJobs",
                                    "message": "jobset failed due to one or more job failures"}), "trainjob")
    assert failed.outcome is RunState.FAILED and not failed.deadline
    late = owner_state(_trainjob({"type": "Failed", "reason": "DeadlineExceeded",
                                  "message": "TrainJob exceeded its active deadline"}), "trainjob")
    assert late.outcome is RunState.FAILED and late.deadline
    assert deadline_reason(30, late).startswith("the run exceeded --timeout 30 s")
    assert owner_state(_trainjob(suspend=True), "trainjob").suspended
    assert owner_state(_trainjob({"type": "Suspended", "reason": "Suspended"}), "trainjob").suspended
