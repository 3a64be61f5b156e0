"""--pod-template: the strategic merge as a pure function (Kubernetes' merge keys and directives), and what a template
may not change of nbtrain's pods, each refusal naming the field and the file."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_unit_helpers import pod_specs

from nbtrain.backends.base import Plan
from nbtrain.backends.kubernetes.override import MERGE_KEYS, read_pod_template, restricted_violations, strategic_merge
from nbtrain.errors import SpecError

MakePlan = Callable[..., Plan]
FLAVORS = ("job", "pytorchjob", "jobset")


# -- the merge (pure) ------------------------------------------------------------------------------------------------

def test_maps_merge_scalars_replace_and_null_removes_a_key() -> None:
    base = {"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"nodeSelector": {"pool": "gpu"},
                                                                    "terminationGracePeriodSeconds": 15}}
    patch = {"metadata": {"labels": {"b": "3", "c": "4"}}, "spec": {"nodeSelector": {"pool": None, "zone": "a"},
                                                                     "terminationGracePeriodSeconds": 60}}
    merged = strategic_merge(base, patch)
    assert merged == {"metadata": {"labels": {"a": "1", "b": "3", "c": "4"}},
                      "spec": {"nodeSelector": {"zone": "a"}, "terminationGracePeriodSeconds": 60}}
    assert base["metadata"]["labels"] == {"a": "1", "b": "2"}  # neither argument is changed


def test_containers_merge_by_name_and_their_env_mounts_and_ports_by_their_keys() -> None:
    base = {"spec": {"containers": [{
        "name": "trainer", "image": "img:1",
        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        "ports": [{"name": "rendezvous", "containerPort": 29500}],
        "resources": {"limits": {"nvidia.com/gpu": "8"}},
    }]}}
    patch = {"spec": {"containers": [{
        "name": "trainer",
        "env": [{"name": "B", "value": "two"}, {"name": "C", "value": "3"}],
        "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
        "ports": [{"name": "metrics", "containerPort": 9090}],
        "resources": {"limits": {"rdma/hca": "1"}},
    }]}}
    (container,) = strategic_merge(base, patch)["spec"]["containers"]
    assert container["image"] == "img:1"
    assert container["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "two"}, {"name": "C", "value": "3"}]
    assert [m["mountPath"] for m in container["volumeMounts"]] == ["/tmp", "/cache"]
    assert [p["containerPort"] for p in container["ports"]] == [29500, 9090]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "8", "rdma/hca": "1"}}


def test_pod_lists_merge_by_kubernetes_merge_keys_and_tolerations_are_replaced() -> None:
    base = {"spec": {
        "volumes": [{"name": "tmp", "emptyDir": {}}],
        "imagePullSecrets": [{"name": "a"}],
        "topologySpreadConstraints": [{"topologyKey": "zone", "maxSkew": 1}],
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
        "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["a"]}],
    }}
    patch = {"spec": {
        "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": "c"}}],
        "imagePullSecrets": [{"name": "b"}],
        "topologySpreadConstraints": [{"topologyKey": "zone", "maxSkew": 2}],
        "tolerations": [{"key": "spot", "operator": "Exists"}],  # Kubernetes gives tolerations no merge key
        "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["b"]}],
    }}
    spec = strategic_merge(base, patch)["spec"]
    assert [v["name"] for v in spec["volumes"]] == ["tmp", "cache"]
    assert spec["imagePullSecrets"] == [{"name": "a"}, {"name": "b"}]
    assert spec["topologySpreadConstraints"] == [{"topologyKey": "zone", "maxSkew": 2}]
    assert spec["tolerations"] == [{"key": "spot", "operator": "Exists"}]
    assert spec["hostAliases"] == [{"ip": "10.0.0.1", "hostnames": ["b"]}]  # hostnames: a plain list, replaced


def test_the_merge_keys_are_kubernetes_own() -> None:
    assert MERGE_KEYS[("spec", "containers")] == "name"
    assert MERGE_KEYS[("spec", "initContainers", "[]", "env")] == "name"
    assert MERGE_KEYS[("spec", "containers", "[]", "volumeMounts")] == "mountPath"
    assert MERGE_KEYS[("spec", "containers", "[]", "ports")] == "containerPort"
    assert MERGE_KEYS[("spec", "volumes")] == "name"
    assert ("spec", "tolerations") not in MERGE_KEYS


def test_patch_directives_delete_an_item_and_replace_a_map_or_a_list() -> None:
    base = {"spec": {"volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}],
                     "affinity": {"nodeAffinity": {"x": 1}, "podAffinity": {"y": 2}}}}
    patch = {"spec": {"volumes": [{"name": "a", "$patch": "delete"}],
                      "affinity": {"$patch": "replace", "podAntiAffinity": {"z": 3}}}}
    spec = strategic_merge(base, patch)["spec"]
    assert spec["volumes"] == [{"name": "b", "emptyDir": {}}]
    assert spec["affinity"] == {"podAntiAffinity": {"z": 3}}
    replaced = strategic_merge(base, {"spec": {"volumes": [{"$patch": "replace"}, {"name": "c", "emptyDir": {}}]}})
    assert replaced["spec"]["volumes"] == [{"name": "c", "emptyDir": {}}]


def test_an_item_without_its_merge_key_and_unknown_directives_are_refused() -> None:
    with pytest.raises(SpecError, match=r"each item of spec\.containers needs its name"):
        strategic_merge({"spec": {"containers": []}}, {"spec": {"containers": [{"image": "x"}]}})
    with pytest.raises(SpecError, match=r"\$retainKeys"):
        strategic_merge({"spec": {}}, {"spec": {"$retainKeys": ["a"]}})


def test_restricted_violations_name_each_field() -> None:
    pod = {"hostNetwork": True, "securityContext": {"runAsUser": 0, "sysctls": [{"name": "kernel.msgmax", "value": "1"}]},
           "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
           "containers": [{"name": "c", "securityContext": {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}},
                           "ports": [{"containerPort": 80, "hostPort": 80}]}]}
    text = "\n".join(restricted_violations(pod))
    for field in ("spec.hostNetwork", "spec.securityContext.runAsUser", "sysctls[name=kernel.msgmax]",
                  "spec.volumes[name=host]: hostPath", "spec.containers[name=c].securityContext.privileged",
                  "allowPrivilegeEscalation must be false", "capabilities.drop must include ALL",
                  "capabilities.add: SYS_ADMIN", "runAsNonRoot must be true", "seccompProfile.type",
                  "ports[containerPort=80].hostPort"):
        assert field in text, field


# -- in the plan ------------------------------------------------------------------------------------------------------

def _file(tmp_path: Path, doc: Any, name: str = "pod.yaml") -> str:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return str(path)


GOOD = {
    "metadata": {"labels": {"team": "vision"}, "annotations": {"example.com/owner": "ml-platform"}},
    "spec": {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "example.com/fabric", "operator": "In", "values": ["ib"]}]}]}}},
        "containers": [{"name": "trainer", "env": [{"name": "FROM_TEMPLATE", "value": "yes"}],
                        "resources": {"limits": {"rdma/hca": "1"}},
                        "volumeMounts": [{"name": "datasets", "mountPath": "/datasets", "readOnly": True}]}],
        "initContainers": [{"name": "warm-cache", "image": "busybox:1.36", "command": ["true"],
                            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                                "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}}],
        "volumes": [{"name": "datasets", "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}}],
    },
}


@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_template_reaches_every_pod_of_every_flavor_and_nbtrains_parts_stay(make_plan: MakePlan, tmp_path: Path,
                                                                              flavor: str) -> None:
    plain = pod_specs(make_plan(flavor=flavor, nodes=2).request.objects[0])[0]
    plan = make_plan(flavor=flavor, nodes=2, pod_template=_file(tmp_path, GOOD))
    pods = pod_specs(plan.request.objects[0])
    assert pods
    for pod in pods:
        (trainer,) = pod["containers"]  # "trainer" in the file is the flavor's own container (pytorch: "pytorch")
        assert {"name": "FROM_TEMPLATE", "value": "yes"} in trainer["env"]
        assert trainer["resources"]["limits"]["rdma/hca"] == "1"
        assert trainer["command"] == plain["containers"][0]["command"] and trainer["args"] == plain["containers"][0]["args"]
        assert [v["name"] for v in pod["volumes"]] == [v["name"] for v in plain["volumes"]] + ["datasets"]
        assert pod["initContainers"][0]["name"] == "warm-cache"
        assert pod["affinity"] == GOOD["spec"]["affinity"]
        assert pod["securityContext"] == plain["securityContext"]
    describe = plan.request.describe
    assert f"pod template: {tmp_path / 'pod.yaml'}, merged into every pod" in describe
    assert "FROM_TEMPLATE" in describe.split("manifests (applied in this order):")[0]  # the file itself is shown


@pytest.mark.parametrize(("fragment", "field"), [
    ({"spec": {"containers": [{"name": "trainer", "command": ["bash"]}]}}, "spec.containers[name=trainer].command"),
    ({"spec": {"containers": [{"name": "trainer", "args": ["x"]}]}}, "spec.containers[name=trainer].args"),
    ({"spec": {"containers": [{"name": "trainer", "image": "other:1"}]}}, "spec.containers[name=trainer].image"),
    ({"spec": {"containers": [{"name": "trainer", "env": [{"name": "NBTRAIN_RUN_ID", "value": "x"}]}]}},
     "spec.containers[name=trainer].env[name=NBTRAIN_RUN_ID]"),
    ({"spec": {"containers": [{"name": "trainer", "env": [{"name": "HOME", "$patch": "delete"}]}]}},
     "spec.containers[name=trainer].env[name=HOME]"),
    ({"spec": {"containers": [{"name": "trainer", "volumeMounts": [{"name": "x", "mountPath": "/tmp"}]}]}},
     "volumeMounts[mountPath=/tmp]"),
    ({"spec": {"containers": [{"name": "trainer", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}},
     "resources.limits.nvidia.com/gpu: the GPUs per pod are --gpus"),
    ({"spec": {"containers": [{"name": "logger", "image": "busybox"}]}}, "spec.containers[name=logger]: a second container"),
    ({"spec": {"volumes": [{"name": "tmp", "$patch": "delete"}]}}, "spec.volumes[name=tmp]: nbtrain's own volume"),
    ({"spec": {"volumes": [{"name": "nbtrain", "emptyDir": {}}]}}, "spec.volumes[name=nbtrain]"),
    ({"spec": {"restartPolicy": "OnFailure"}}, "spec.restartPolicy"),
    ({"metadata": {"name": "mine"}}, "metadata.name"),
    ("metadata:\n  1: x\n  labels: {2: y}\n", "metadata.1: nbtrain names"),
    ({"metadata": {"labels": {"nbtrain.dev/run-id": "x"}}}, "metadata.labels.nbtrain.dev/run-id"),
    ({"metadata": {"labels": {"app.kubernetes.io/managed-by": "me"}}}, "metadata.labels.app.kubernetes.io/managed-by"),
    ({"metadata": {"labels": None}}, "metadata.labels.nbtrain.dev/run-id: set by nbtrain"),
    ({"metadata": None}, "metadata.labels.nbtrain.dev/attempt: set by nbtrain"),
    ({"spec": {"hostNetwork": True}}, "spec.hostNetwork must not be true"),
    ({"spec": {"hostPID": True}}, "spec.hostPID must not be true"),
    ({"spec": {"securityContext": {"runAsNonRoot": False}}}, "spec.securityContext.runAsNonRoot: nbtrain's pods run as non-root"),
    ({"spec": {"containers": [{"name": "trainer", "securityContext": {"privileged": True}}]}},
     "spec.containers[name=trainer].securityContext.privileged must not be true"),
    ({"spec": {"containers": [{"name": "trainer", "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}]}},
     "spec.containers[name=trainer].securityContext.capabilities.add: NET_ADMIN"),
    ({"spec": {"initContainers": [{"name": "setup", "image": "busybox"}]}},
     "spec.initContainers[name=setup].securityContext.allowPrivilegeEscalation must be false"),
    ({"spec": {"volumes": [{"name": "host", "hostPath": {"path": "/data"}}]}}, "spec.volumes[name=host]: hostPath"),
    ({"spec": {"afinity": {}}}, "spec.afinity: Extra inputs are not permitted (the Kubernetes API's PodTemplateSpec"),
    ({"spec": {"terminationGracePeriodSeconds": "soon"}}, "spec.terminationGracePeriodSeconds: Input should be a valid"),
    ({"spec": {"containers": [{"name": "trainer", "env": [{"name": "WANDB_API_KEY", "value": "0123456789abcdef"}]}]}},
     "spec.containers[name=trainer].env[name=WANDB_API_KEY]: looks like a secret"),
    # issue 28: the restricted profile's SELinux, hostProcess and AppArmor rules; hooks; fields an option sets
    ({"spec": {"containers": [{"name": "trainer", "securityContext": {"seLinuxOptions": {"type": "spc_t"}}}]}},
     "spec.containers[name=trainer].securityContext.seLinuxOptions.type: 'spc_t' must be one of container_engine_t"),
    ({"spec": {"securityContext": {"seLinuxOptions": {"type": "spc_t", "user": "root"}}}},
     "spec.securityContext.seLinuxOptions.user must not be set"),
    ({"spec": {"securityContext": {"windowsOptions": {"hostProcess": True}}}},
     "spec.securityContext.windowsOptions.hostProcess must not be true"),
    ({"metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/trainer": "unconfined"}}},
     "metadata.annotations.container.apparmor.security.beta.kubernetes.io/trainer: 'unconfined' must be"),
    ({"spec": {"containers": [{"name": "trainer", "lifecycle": {"postStart": {"exec": {"command": ["sh"]}}}}]}},
     "spec.containers[name=trainer].lifecycle: the trainer runs nbtrain's command only"),
    ({"spec": {"serviceAccountName": "admin"}}, "spec.serviceAccountName: set by --service-account"),
    ({"spec": {"priorityClassName": "system-cluster-critical"}}, "spec.priorityClassName: set by --priority-class"),
    ({"spec": {"nodeSelector": {"pool": "cpu"}}}, "spec.nodeSelector: set by --node-selector"),
    ({"spec": {"tolerations": [{"operator": "Exists"}]}}, "spec.tolerations: set by --toleration"),
    ({"spec": {"automountServiceAccountToken": True}}, "spec.automountServiceAccountToken: set by nbtrain"),
    ({"metadata": {"annotations": {"example.com/pull": "ghp_abcdefghijklmnopqrstuvwxyz0123456789"}}},
     "metadata.annotations.example.com/pull: looks like a secret"),
])
def test_what_would_break_nbtrains_pods_is_refused_naming_the_field(make_plan: MakePlan, tmp_path: Path,
                                                                    fragment: dict[str, Any], field: str) -> None:
    path = _file(tmp_path, fragment)
    with pytest.raises(SpecError, match=re.escape(field)) as caught:
        make_plan(pod_template=path)
    assert f"--pod-template {path}" in str(caught.value)


def test_allow_secrets_lets_a_secret_looking_value_through(make_plan: MakePlan, tmp_path: Path) -> None:
    path = _file(tmp_path, {"spec": {"containers": [{"name": "trainer", "env": [
        {"name": "WANDB_API_KEY", "value": "0123456789abcdef"}]}]}})
    pod = pod_specs(make_plan(pod_template=path, allow_secrets=True).request.objects[0])[0]
    assert {"name": "WANDB_API_KEY", "value": "0123456789abcdef"} in pod["containers"][0]["env"]


@pytest.mark.parametrize(("text", "message"), [
    ("spec: [", "not valid YAML"),
    ("- a\n- b\n", "expected one YAML mapping"),
    ("apiVersion: v1\nkind: PodTemplate\ntemplate: {}\n", "give the pod template itself"),
    ("spec: {}\nstatus: {}\n", "status is not part of a PodTemplateSpec"),
    ("spec: {}\n1: x\n", "1 is not part of a PodTemplateSpec"),
])
def test_a_file_that_is_no_pod_template_fragment_is_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SpecError, match=re.escape(message)):
        read_pod_template(_file(tmp_path, text))


def test_a_missing_file_is_refused_naming_it(make_plan: MakePlan, tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"--pod-template .*missing\.yaml: cannot read the file"):
        make_plan(pod_template=str(tmp_path / "missing.yaml"))


def test_exported_manifests_carry_the_merged_pods(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nbtrain.bundle import capture_cell
    from nbtrain.export.manifests import manifest_yaml
    from nbtrain.spec import JobSpec

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    bundle = capture_cell("6 * 7\n", {"__name__": "__main__"})
    spec = JobSpec(name="export", backend="kubernetes", image="ghcr.io/org/train:1", pod_template=_file(tmp_path, GOOD))
    for flavor in FLAVORS:
        docs = list(yaml.safe_load_all(manifest_yaml(spec, bundle, flavor)))
        pods = pod_specs(docs[0])
        assert pods and all({"name": "FROM_TEMPLATE", "value": "yes"} in p["containers"][0]["env"] for p in pods)


def test_a_template_keeps_openshifts_mode_without_ids(make_plan: MakePlan, tmp_path: Path) -> None:
    from nbtrain.backends.kubernetes import KubeOptions

    options = KubeOptions(image="ghcr.io/org/train:1", run_as_user=None)  # NBTRAIN_K8S_RUN_AS_USER=auto
    for pod in pod_specs(make_plan(options=options, pod_template=_file(tmp_path, GOOD)).request.objects[0]):
        assert not {"runAsUser", "runAsGroup", "fsGroup"} & set(pod["securityContext"])
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert restricted_violations(pod) == []


def test_nbtrains_own_init_containers_are_kept() -> None:
    from nbtrain.backends.kubernetes.override import PodOverride, apply_override

    init = {"name": "fetch-bundle", "image": "img:1", "command": ["fetch"]}
    template = {"metadata": {"labels": {}}, "spec": {"containers": [{"name": "trainer", "image": "img:1"}],
                                                     "initContainers": [init], "securityContext": {"runAsNonRoot": True}}}
    override = PodOverride("pod.yaml", {"spec": {"initContainers": [{"name": "fetch-bundle", "command": ["true"]}]}})
    with pytest.raises(SpecError, match=re.escape("spec.initContainers[name=fetch-bundle]: nbtrain's own init")):
        apply_override(template, override, trainer="trainer", gpu_resource="nvidia.com/gpu")


def test_a_key_that_is_no_string_is_refused_by_the_schema(make_plan: MakePlan, tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"spec\[1\]: Keys should be strings \(the Kubernetes API's PodTemplateSpec schema"):
        make_plan(pod_template=_file(tmp_path, "spec:\n  1: x\n"))


def test_a_template_cannot_change_what_an_option_sets_only_repeat_it(make_plan: MakePlan, tmp_path: Path) -> None:
    """A profile that locks --service-account, --priority-class or --node-selector cannot be routed around through
    the template: the template may repeat the option's value, never change it (issue 28)."""
    same = _file(tmp_path, {"spec": {"serviceAccountName": "team-sa", "nodeSelector": {"pool": "gpu"}}})
    pod = pod_specs(make_plan(service_account="team-sa", node_selector={"pool": "gpu"},
                              pod_template=same).request.objects[0])[0]
    assert pod["serviceAccountName"] == "team-sa" and pod["nodeSelector"] == {"pool": "gpu"}
    other = _file(tmp_path, {"spec": {"serviceAccountName": "admin", "priorityClassName": "high"}})
    with pytest.raises(SpecError) as caught:
        make_plan(service_account="team-sa", priority_class="low", pod_template=other)
    assert "spec.serviceAccountName: set by --service-account (a profile may lock it)" in str(caught.value)
    assert "spec.priorityClassName: set by --priority-class" in str(caught.value)
