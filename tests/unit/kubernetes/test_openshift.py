"""OpenShift: ``NBTRAIN_K8S_RUN_AS_USER=auto`` leaves the ids to the platform (its ``restricted-v2`` SCC refuses fixed
ids outside the namespace's range) and keeps the rest of the restricted profile; a uid sets them; anything else is
refused before anything is created, naming the variable, the value and the fix."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
from k8s_unit_helpers import crd_schema, pod_specs, walk
from test_manifests import CR_SCHEMAS, FLAVORS, full_spec, k8s_versions

from nbtrain.backends.base import Plan
from nbtrain.backends.kubernetes import KubeOptions, KubernetesBackend
from nbtrain.errors import SpecError
from nbtrain.store import Store

MakePlan = Callable[..., Plan]
IDS = {"runAsUser", "runAsGroup", "fsGroup"}
OPENSHIFT = KubeOptions(image="ghcr.io/org/train:1", run_as_user=None)
RESTRICTED_VOLUMES = {"configMap", "emptyDir", "secret", "projected", "persistentVolumeClaim", "ephemeral",
                      "downwardAPI", "csi"}


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """What the Pod Security "restricted" level (v1.30 and later) refuses in ``pod`` (a pod spec)."""
    found = []
    pod_security = pod.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            found.append(key)
    for volume in pod.get("volumes") or []:
        if not set(volume) - {"name"} <= RESTRICTED_VOLUMES:
            found.append(f"volume {volume['name']}")
    if pod_security.get("runAsUser") == 0:
        found.append("pod runAsUser 0")
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        security = container.get("securityContext") or {}
        name = container["name"]
        if security.get("privileged"):
            found.append(f"{name}: privileged")
        if security.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation")
        capabilities = security.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []) or set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            found.append(f"{name}: capabilities")
        if security.get("runAsNonRoot", pod_security.get("runAsNonRoot")) is not True:
            found.append(f"{name}: runAsNonRoot")
        if security.get("runAsUser") == 0:
            found.append(f"{name}: runAsUser 0")
        seccomp = (security.get("seccompProfile") or pod_security.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"{name}: seccompProfile")
        if any(port.get("hostPort") for port in container.get("ports") or []):
            found.append(f"{name}: hostPort")
    return found


@pytest.mark.parametrize("value", ["auto", "AUTO", " auto "])
def test_auto_means_no_ids(value: str) -> None:
    assert KubeOptions.from_env({"NBTRAIN_K8S_RUN_AS_USER": value}).run_as_user is None


def test_a_uid_or_nothing_sets_the_ids() -> None:
    assert KubeOptions.from_env({"NBTRAIN_K8S_RUN_AS_USER": "1000620000"}).run_as_user == 1000620000
    assert KubeOptions.from_env({}).run_as_user == 1000
    assert KubeOptions.from_env({"NBTRAIN_K8S_RUN_AS_USER": ""}).run_as_user == 1000


@pytest.mark.parametrize("value", ["openshift", "0", "-1", "1000.0", "root", "2147483648", "１０００"])
def test_anything_else_is_refused_naming_the_variable_the_value_and_the_fix(value: str) -> None:
    with pytest.raises(SpecError) as caught:
        KubeOptions.from_env({"NBTRAIN_K8S_RUN_AS_USER": value})
    message = str(caught.value)
    assert f"NBTRAIN_K8S_RUN_AS_USER={value!r}" in message
    assert "NBTRAIN_K8S_RUN_AS_USER=auto" in message and "NBTRAIN_K8S_RUN_AS_USER=1000" in message


def test_a_bad_value_is_refused_when_the_backend_is_made_before_anything_is_planned_or_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NBTRAIN_K8S_RUN_AS_USER", "openshift")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    with pytest.raises(SpecError, match="NBTRAIN_K8S_RUN_AS_USER='openshift'"):
        KubernetesBackend(Store(tmp_path / "home"))
    monkeypatch.setenv("NBTRAIN_K8S_RUN_AS_USER", "auto")
    assert KubernetesBackend(Store(tmp_path / "home")).options.run_as_user is None


@pytest.mark.parametrize("flavor", FLAVORS)
def test_openshift_pods_of_every_flavor_carry_no_ids_and_stay_restricted(make_plan: MakePlan, flavor: str) -> None:
    objects = make_plan(flavor=flavor, options=OPENSHIFT, **full_spec()).request.objects
    for obj in objects:
        assert not [path for path, _ in walk(obj) if path.rsplit(".", 1)[-1] in IDS], obj["kind"]
    pods = pod_specs(objects[0])
    assert len(pods) == (2 if flavor == "pytorchjob" else 1)  # PyTorchJob: Master and Worker templates
    for pod in pods:
        assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
        assert restricted_violations(pod) == []


@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_uid_sets_every_id_on_every_pod_of_every_flavor(make_plan: MakePlan, flavor: str) -> None:
    options = KubeOptions.from_env({"NBTRAIN_K8S_IMAGE": "ghcr.io/org/train:1", "NBTRAIN_K8S_RUN_AS_USER": "4242"})
    for pod in pod_specs(make_plan(flavor=flavor, options=options, **full_spec()).request.objects[0]):
        assert {key: pod["securityContext"][key] for key in IDS} == dict.fromkeys(IDS, 4242)
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert restricted_violations(pod) == []


@pytest.mark.parametrize("flavor", FLAVORS)
def test_openshift_manifests_validate_strictly_at_the_oldest_and_newest_versions(make_plan: MakePlan, flavor: str) -> None:
    objects = make_plan(flavor=flavor, options=OPENSHIFT, **full_spec()).request.objects
    workload = objects[0]
    checked = [o for o in objects if o["kind"] not in CR_SCHEMAS]
    checked += [{"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": value}
                for path, value in walk(workload) if path.endswith("template") and "containers" in (value.get("spec") or {})]
    if flavor == "jobset":
        job_spec = workload["spec"]["replicatedJobs"][0]["template"]["spec"]
        checked.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": job_spec})
    versions = k8s_versions()
    for version in (versions[0], versions[-1]):
        for obj in checked:
            kubernetes_validate.validate(obj, version, strict=True)
    if workload["kind"] in CR_SCHEMAS:
        jsonschema.validate(workload, crd_schema(*CR_SCHEMAS[workload["kind"]]))


def test_the_restricted_check_catches_what_it_should() -> None:
    """The check above is not vacuous: a root pod, a pod without runAsNonRoot and a hostPath volume are caught."""
    container = {"name": "c", "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                                  "seccompProfile": {"type": "RuntimeDefault"}}}
    assert restricted_violations({"securityContext": {"runAsNonRoot": True}, "containers": [container]}) == []
    assert restricted_violations({"securityContext": {}, "containers": [container]}) == ["c: runAsNonRoot"]
    assert "pod runAsUser 0" in restricted_violations(
        {"securityContext": {"runAsNonRoot": True, "runAsUser": 0}, "containers": [container]})
    assert restricted_violations({"securityContext": {"runAsNonRoot": True}, "containers": [container],
                                  "volumes": [{"name": "h", "hostPath": {"path": "/"}}]}) == ["volume h"]


@pytest.mark.parametrize("runtime", ["torch-distributed", "nbtrain-torch"])
def test_openshift_trainjob_pods_carry_no_ids_and_stay_restricted(make_plan: MakePlan, runtime: str) -> None:
    """The TrainJob and the Job Trainer makes of it on either runtime: no ids anywhere, runAsNonRoot kept."""
    from test_trainjob import STOCK, materialised, trainjob_spec  # test_trainjob imports this module

    from nbtrain.backends.kubernetes.trainjob import gang_runtime

    plan = make_plan(flavor="trainjob", options=OPENSHIFT, **trainjob_spec())
    job = materialised(plan, STOCK if runtime == "torch-distributed" else gang_runtime())
    for obj in [*plan.request.objects, job]:
        assert not [path for path, _ in walk(obj) if path.rsplit(".", 1)[-1] in IDS], obj["kind"]
    pod = job["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert restricted_violations(pod) == []
    versions = k8s_versions()
    for version in (versions[0], versions[-1]):
        kubernetes_validate.validate(job, version, strict=True)
