"""Platform knobs on Kubernetes (--gpu-resource, --workload-priority, --spread-by, --pod-template): in every flavor's
manifests, every knob at once strictly valid at the oldest and newest Kubernetes versions and against the vendored CRD
schemas, the restricted profile kept; refused by the other backends and for values the API server would refuse."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from k8s_unit_helpers import crd_schema, pod_specs, walk

from nbtrain.backends.base import Plan
from nbtrain.backends.kubernetes.manifests import KUEUE_PRIORITY_LABEL, KUEUE_QUEUE_LABEL
from nbtrain.backends.kubernetes.override import restricted_violations
from nbtrain.errors import SpecError
from nbtrain.flags import build_parser, spec_from_namespace, unsupported_options
from nbtrain.flags.tomlmap import spec_from_toml
from nbtrain.spec import FLAVORS as FLAVORS_OF_SPEC
from nbtrain.spec import JobSpec

MakePlan = Callable[..., Plan]
FLAVORS = ("job", "pytorchjob", "jobset")
CR_SCHEMAS = {"PyTorchJob": ("pytorchjobs.yaml", "v1"), "JobSet": ("jobsets.yaml", "v1alpha2")}
KNOBS: dict[str, Any] = dict(gpu_resource="amd.com/gpu", workload_priority="research-high",
                             spread_by="kubernetes.io/hostname", queue="team-a")
TEMPLATE = {
    "metadata": {"labels": {"example.com/fabric": "ib"}},
    "spec": {
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 50, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                              "labelSelector": {"matchLabels": {"app": "inference"}}}}]}},
        "containers": [{"name": "trainer", "env": [{"name": "NCCL_IB_HCA", "value": "mlx5"}],
                        "resources": {"limits": {"rdma/hca": "1"}, "requests": {"rdma/hca": "1"}}}],
        "initContainers": [{"name": "log-shipper", "image": "fluent/fluent-bit:3.1", "restartPolicy": "Always",
                            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                                "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}}],
        "volumes": [{"name": "datasets", "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}}],
    },
}


def _all_knobs(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    path = tmp_path / "pod-template.yaml"
    path.write_text(yaml.safe_dump(TEMPLATE))
    return {"nodes": 3, "procs_per_node": 8, "device": "gpu", "timeout_s": 3600.0, "cpu": "16", "memory": "128Gi",
            "volumes": ("training-data:/data",), "image_pull_secrets": ("registry-creds",),
            "priority_class": "high-priority", "shm_size": "16Gi", "labels": {"cost-center": "ml-42"},
            "annotations": {"sidecar.istio.io/inject": "false"},
            "tolerations": ({"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
            "node_selector": {"example.com/gpu": "mi300x"}, "secret_env": {"HF_TOKEN": "hf-credentials/token"},
            **KNOBS, "pod_template": str(path), **overrides}


def _oldest_and_newest() -> list[str]:
    newest = kubernetes_validate.latest_version()
    return ["1.30.0", f"{'.'.join(newest.split('.')[:2])}.0"]


@pytest.mark.parametrize("flavor", FLAVORS)
def test_every_flavor_carries_every_knob(make_plan: MakePlan, tmp_path: Path, flavor: str) -> None:
    workload = make_plan(flavor=flavor, **_all_knobs(tmp_path)).request.objects[0]
    assert workload["metadata"]["labels"][KUEUE_PRIORITY_LABEL] == "research-high"
    assert workload["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "team-a"
    pods = pod_specs(workload)
    assert pods
    for pod in pods:
        trainer = pod["containers"][0]
        assert trainer["resources"]["limits"]["amd.com/gpu"] == "8"
        assert "nvidia.com/gpu" not in trainer["resources"]["limits"]
        assert trainer["resources"]["limits"]["rdma/hca"] == "1"  # from the template
        (spread,) = pod["topologySpreadConstraints"]
        assert spread == {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
                          "labelSelector": {"matchLabels": {"nbtrain.dev/run-id": "digits-3fa9c2",
                                                            "nbtrain.dev/attempt": "0"}},
                          "nodeAffinityPolicy": "Honor", "nodeTaintsPolicy": "Honor"}
        assert {"name": "NCCL_IB_HCA", "value": "mlx5"} in trainer["env"]
        assert pod["initContainers"][0]["name"] == "log-shipper"
        assert "podAntiAffinity" in pod["affinity"]


@pytest.mark.parametrize("flavor", FLAVORS)
def test_the_spread_selects_exactly_the_attempts_pods(make_plan: MakePlan, flavor: str) -> None:
    workload = make_plan(flavor=flavor, nodes=2, spread_by="topology.kubernetes.io/zone").request.objects[0]
    for path, template in walk(workload):
        if path.endswith("template") and "containers" in (template.get("spec") or {}):
            selector = template["spec"]["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"]
            assert selector.items() <= template["metadata"]["labels"].items()


@pytest.mark.parametrize("flavor", FLAVORS)
def test_every_knob_at_once_is_strictly_valid_at_the_oldest_and_newest_kubernetes(make_plan: MakePlan, tmp_path: Path,
                                                                                 flavor: str) -> None:
    objects = make_plan(flavor=flavor, **_all_knobs(tmp_path)).request.objects
    workload = objects[0]
    checked = [o for o in objects if o["kind"] not in CR_SCHEMAS]
    checked += [{"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": value}
                for path, value in walk(workload) if path.endswith("template") and "containers" in (value.get("spec") or {})]
    for version in _oldest_and_newest():
        for obj in checked:
            kubernetes_validate.validate(obj, version, strict=True)
    if workload["kind"] in CR_SCHEMAS:
        filename, version = CR_SCHEMAS[workload["kind"]]
        jsonschema.validate(workload, crd_schema(filename, version))
    for pod in pod_specs(workload):
        assert restricted_violations(pod) == []


def test_the_job_pod_template_with_every_knob_is_a_valid_kueue_workload_podset(make_plan: MakePlan,
                                                                               tmp_path: Path) -> None:
    job = make_plan(**_all_knobs(tmp_path)).request.objects[0]
    workload = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "job-x"},
                "spec": {"queueName": "team-a",  # what Kueue makes of the priority label: the name fits its pattern
                         "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                                              "name": job["metadata"]["labels"][KUEUE_PRIORITY_LABEL]},
                         "podSets": [{"name": "main", "count": 3, "template": job["spec"]["template"]}]}}
    jsonschema.validate(workload, crd_schema("workloads.yaml", "v1beta2"))


def test_without_the_knobs_gpus_are_nvidias_and_nothing_else_changes(make_plan: MakePlan) -> None:
    workload = make_plan(device="gpu", procs_per_node=4, queue="team-a").request.objects[0]
    assert KUEUE_PRIORITY_LABEL not in workload["metadata"]["labels"]
    for pod in pod_specs(workload):
        assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
        assert "topologySpreadConstraints" not in pod and "initContainers" not in pod


def test_the_plan_names_the_gpu_resource(make_plan: MakePlan) -> None:
    describe = make_plan(device="gpu", procs_per_node=2, gpu_resource="amd.com/gpu").request.describe
    assert "GPU: amd.com/gpu 2 per pod" in describe
    assert "GPU: nvidia.com/gpu 2 per pod (NCCL)" in make_plan(device="gpu", procs_per_node=2).request.describe


@pytest.mark.parametrize("backend", ["local", "slurm"])
def test_other_backends_refuse_every_knob(backend: str) -> None:
    spec = JobSpec(gpu_resource="amd.com/gpu", workload_priority="high", spread_by="kubernetes.io/hostname",
                   pod_template="pod.yaml")
    messages = unsupported_options(spec, backend)
    assert [m.split()[0] for m in messages] == ["--gpu-resource", "--workload-priority", "--spread-by",
                                                "--pod-template"], messages
    assert all("is a Kubernetes option" in m for m in messages)


def test_workload_priority_needs_a_queue() -> None:
    (message,) = unsupported_options(JobSpec(backend="kubernetes", workload_priority="high"), "kubernetes")
    assert message.startswith("--workload-priority high on the kubernetes backend needs --queue"), message
    assert unsupported_options(JobSpec(backend="kubernetes", workload_priority="high", queue="q"), "kubernetes") == []


def test_the_knobs_reach_their_fields_from_flags_and_nbtrain_toml() -> None:
    ns = build_parser("magic").parse_args([
        "--gpu-resource", "amd.com/gpu", "--workload-priority", "research-high", "--spread-by",
        "kubernetes.io/hostname", "--pod-template", "pod.yaml", "--queue", "team-a"])
    expected = JobSpec(backend="kubernetes", gpu_resource="amd.com/gpu", workload_priority="research-high",
                       spread_by="kubernetes.io/hostname", pod_template="pod.yaml", queue="team-a")
    assert spec_from_namespace(ns, JobSpec(backend="kubernetes")) == expected
    toml = {"job": {"backend": "kubernetes"}, "kubernetes": {
        "gpu_resource": "amd.com/gpu", "workload_priority": "research-high", "spread_by": "kubernetes.io/hostname",
        "pod_template": "pod.yaml", "queue": "team-a"}}
    assert spec_from_toml(toml) == expected


def test_nbtrain_toml_sets_default_requests_and_flags_override_them(make_plan: MakePlan) -> None:
    """A platform team's defaults (cpu, memory and the knobs) in nbtrain.toml; a flag wins over them."""
    base = spec_from_toml({"job": {"backend": "kubernetes"}, "kubernetes": {
        "cpu": "8", "memory": "64Gi", "gpu_resource": "amd.com/gpu", "spread_by": "kubernetes.io/hostname"}})
    spec = spec_from_namespace(build_parser("magic").parse_args(["--memory", "96Gi"]), base)
    assert (spec.cpu, spec.memory, spec.gpu_resource, spec.spread_by) == ("8", "96Gi", "amd.com/gpu",
                                                                           "kubernetes.io/hostname")
    pod = pod_specs(make_plan(**{f: getattr(spec, f) for f in ("cpu", "memory", "gpu_resource", "spread_by")},
                              device="gpu").request.objects[0])[0]
    assert pod["containers"][0]["resources"] == {"requests": {"cpu": "8", "memory": "96Gi"},
                                                 "limits": {"memory": "96Gi", "amd.com/gpu": "1"}}


@pytest.mark.parametrize(("fields", "message"), [
    ({"gpu_resource": "gpu"}, "--gpu-resource 'gpu': not an extended resource name"),
    ({"gpu_resource": "kubernetes.io/gpu"}, "--gpu-resource 'kubernetes.io/gpu': not an extended resource name"),
    ({"gpu_resource": "amd.com/GPU card"}, "--gpu-resource 'amd.com/GPU card'"),
    ({"workload_priority": "High Priority", "queue": "q"}, "--workload-priority 'High Priority': not a "
                                                           "WorkloadPriorityClass name"),
    ({"spread_by": "not a key"}, "--spread-by 'not a key': not a node label key"),
    ({"pod_template": " "}, "--pod-template: the path is empty"),
])
def test_each_value_the_api_would_refuse_is_a_spec_error(make_plan: MakePlan, fields: dict[str, Any],
                                                         message: str) -> None:
    with pytest.raises(SpecError, match=re.escape(message)):
        make_plan(**fields)


def test_a_gpu_resource_of_another_vendor_is_accepted(make_plan: MakePlan) -> None:
    for name in ("amd.com/gpu", "gpu.intel.com/i915", "gpu.intel.com/xe", "nvidia.com/mig-1g.10gb"):
        pod = pod_specs(make_plan(device="gpu", gpu_resource=name).request.objects[0])[0]
        assert pod["containers"][0]["resources"]["limits"][name] == "1"


def test_a_profile_sets_default_requests_and_knobs_and_can_lock_them() -> None:
    from nbtrain.profiles.model import parse_profile
    from nbtrain.profiles.resolve import resolve

    profile = parse_profile("amd-pool", {
        "version": "1.0", "description": "MI300X pool", "locked": ["gpu-resource", "pod-template"],
        "options": {"backend": "kubernetes", "cpu": "16", "memory": "256Gi", "gpu-resource": "amd.com/gpu",
                    "spread-by": "kubernetes.io/hostname", "pod-template": "/etc/nbtrain/amd-pod.yaml"},
    }, "test")
    parser = build_parser("magic")
    spec = resolve(JobSpec(), parser.parse_args(["--memory", "300Gi"]), profile).spec
    assert (spec.cpu, spec.memory, spec.gpu_resource, spec.spread_by, spec.pod_template) == (
        "16", "300Gi", "amd.com/gpu", "kubernetes.io/hostname", "/etc/nbtrain/amd-pod.yaml")
    with pytest.raises(SpecError, match=r"locks gpu-resource to amd.com/gpu"):
        resolve(JobSpec(), parser.parse_args(["--gpu-resource", "nvidia.com/gpu"]), profile)


_TRAINJOB = pytest.mark.skipif("trainjob" not in FLAVORS_OF_SPEC, reason="the trainjob flavor has not landed")


@_TRAINJOB
def test_the_trainjob_flavor_carries_the_knobs_it_can_and_refuses_the_others_by_name(make_plan: MakePlan,
                                                                                      tmp_path: Path) -> None:
    """A TrainJob takes the trainer's fields and one runtime patch: the GPU resource, the Kueue priority label and
    what a template adds to the trainer's env and the pods' labels and affinity reach it; --spread-by and the
    template's init container, which it has no field for, are refused naming the option."""
    knobs = _all_knobs(tmp_path, spread_by=None, priority_class=None)  # a TrainJob has no field for either
    trainjob_template = tmp_path / "trainjob-template.yaml"
    trainjob_template.write_text(yaml.safe_dump({**TEMPLATE, "spec": {
        k: v for k, v in TEMPLATE["spec"].items() if k != "initContainers"}}))
    workload = make_plan(flavor="trainjob", **{**knobs, "pod_template": str(trainjob_template)}).request.objects[0]
    assert workload["kind"] == "TrainJob"
    assert workload["metadata"]["labels"][KUEUE_PRIORITY_LABEL] == "research-high"
    values = [value for _, value in walk(workload)]
    assert any(isinstance(v, dict) and v.get("amd.com/gpu") == "8" for v in values)
    assert {"name": "NCCL_IB_HCA", "value": "mlx5"} in workload["spec"]["trainer"]["env"]
    assert any(isinstance(v, dict) and v.get("example.com/fabric") == "ib" for v in values)
    assert any(isinstance(v, dict) and "podAntiAffinity" in v for v in values)
    filename, version = "trainer-trainjobs.yaml", "v1alpha1"
    jsonschema.validate(workload, crd_schema(filename, version))
    # the pods Trainer makes of it, on its stock runtime and on nbtrain's: strictly valid and restricted
    from test_openshift import restricted_violations as restricted_by_the_tests
    from test_trainjob import STOCK, materialised

    from nbtrain.backends.kubernetes.trainjob import gang_runtime

    plan = make_plan(flavor="trainjob", **{**knobs, "pod_template": str(trainjob_template)})
    for runtime in (STOCK, gang_runtime()):
        job = materialised(plan, runtime)
        for k8s_version in _oldest_and_newest():
            kubernetes_validate.validate(job, k8s_version, strict=True)
        pod = job["spec"]["template"]["spec"]
        assert restricted_violations(pod) == [] and restricted_by_the_tests(pod) == []
        assert pod["containers"][0]["resources"]["limits"]["amd.com/gpu"] == "8"
        assert "podAntiAffinity" in pod["affinity"]
        assert job["spec"]["template"]["metadata"]["labels"]["example.com/fabric"] == "ib"
    with pytest.raises(SpecError, match=re.escape("--spread-by")):
        make_plan(flavor="trainjob", spread_by="kubernetes.io/hostname")
    with pytest.raises(SpecError, match=re.escape("--pod-template")):
        make_plan(flavor="trainjob", **knobs)  # TEMPLATE's init container: no place for it in a TrainJob
