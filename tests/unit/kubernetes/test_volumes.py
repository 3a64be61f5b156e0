"""--volume CLAIM:/path on Kubernetes: mounted on every pod of every flavor, checkpoints on it, and every value the
cluster would refuse (or nbtrain could not use) refused before anything is created, naming the value and the fix."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from k8s_unit_helpers import pod_specs

from nbtrain.backends.base import Plan
from nbtrain.errors import SpecError
from nbtrain.flags import unsupported_options
from nbtrain.flags.tomlmap import spec_from_toml, spec_to_toml
from nbtrain.spec import JobSpec

MakePlan = Callable[..., Plan]
FLAVORS = ("job", "pytorchjob", "jobset")


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


@pytest.mark.parametrize("flavor", FLAVORS)
def test_every_pod_of_every_flavor_mounts_each_claim_and_checkpoints_on_the_volume(make_plan: MakePlan,
                                                                                   flavor: str) -> None:
    plan = make_plan(flavor=flavor, nodes=2, volumes=("training-data:/data", "hf-cache:/cache/hf"), max_restarts=1,
                     keep_checkpoints=4)
    pods = list(pod_specs(plan.request.objects[0]))
    assert pods
    for pod in pods:
        claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]
                  if "persistentVolumeClaim" in v}
        assert sorted(claims.values()) == ["hf-cache", "training-data"]
        container = pod["containers"][0]
        mounted = {m["mountPath"]: claims[m["name"]] for m in container["volumeMounts"] if m["name"] in claims}
        assert mounted == {"/data": "training-data", "/cache/hf": "hf-cache"}
        env = _env(container)
        assert env["NBTRAIN_CHECKPOINT_DIR"] == "/data/nbtrain-checkpoints/digits-3fa9c2"
        assert env["NBTRAIN_KEEP_CHECKPOINTS"] == "4"


def test_checkpoint_dir_under_a_volume_is_the_runs_checkpoint_root(make_plan: MakePlan) -> None:
    plan = make_plan(volumes=("training-data:/data",), checkpoint_dir="/data/runs/ckpt")
    for pod in pod_specs(plan.request.objects[0]):
        assert _env(pod["containers"][0])["NBTRAIN_CHECKPOINT_DIR"] == "/data/runs/ckpt/digits-3fa9c2"


def test_without_a_volume_pods_get_no_checkpoint_directory(make_plan: MakePlan) -> None:
    for pod in pod_specs(make_plan().request.objects[0]):
        assert "NBTRAIN_CHECKPOINT_DIR" not in _env(pod["containers"][0])
        assert not any("persistentVolumeClaim" in v for v in pod["volumes"])


@pytest.mark.parametrize(("fields", "option"), [
    ({"max_restarts": 1}, "--max-restarts 1"),
    ({"checkpoint_dir": "/data/ckpt"}, "--checkpoint-dir /data/ckpt"),
    ({"keep_checkpoints": 5}, "--keep-checkpoints 5"),
])
def test_checkpoint_options_without_a_volume_are_refused_naming_volume_as_the_fix(make_plan: MakePlan,
                                                                                  fields: dict[str, Any],
                                                                                  option: str) -> None:
    with pytest.raises(SpecError) as caught:
        make_plan(**fields)
    message = str(caught.value)
    assert message.startswith(option) and "kubernetes" in message, message
    assert "Add --volume CLAIM:/MOUNT/PATH" in message, message


def test_with_a_volume_the_checkpoint_options_are_honoured_on_kubernetes() -> None:
    spec = JobSpec(backend="kubernetes", volumes=("data:/data",), checkpoint_dir="/data/c", max_restarts=2,
                   keep_checkpoints=5)
    assert unsupported_options(spec, "kubernetes") == []


@pytest.mark.parametrize("backend", ["local", "slurm"])
def test_other_backends_refuse_volume(backend: str) -> None:
    messages = unsupported_options(JobSpec(volumes=("data:/data",)), backend)
    assert len(messages) == 1 and messages[0].startswith("--volume data:/data is a Kubernetes option"), messages


@pytest.mark.parametrize("text", ["data", "data:relative/path", ":/data", "data:"])
def test_a_volume_not_written_as_claim_colon_path_is_refused_with_an_example(text: str) -> None:
    with pytest.raises(SpecError, match=re.escape(f"--volume {text!r}: write it as CLAIM:/mount/path")):
        JobSpec(backend="kubernetes", volumes=(text,))


@pytest.mark.parametrize("claim", ["Training_Data", "data-", "a" * 254])
def test_a_claim_that_is_not_a_dns_name_is_refused(make_plan: MakePlan, claim: str) -> None:
    with pytest.raises(SpecError, match=re.escape(f"{claim!r} is not a PersistentVolumeClaim name")):
        make_plan(volumes=(f"{claim}:/data",))


@pytest.mark.parametrize("path", ["/data/", "/data/../etc", "/data//x", "/./data", "/"])
def test_a_mount_path_that_is_not_a_clean_absolute_path_is_refused(make_plan: MakePlan, path: str) -> None:
    with pytest.raises(SpecError, match=re.escape(f"the mount path {path!r} must be an absolute path")):
        make_plan(volumes=(f"data:{path}",))


@pytest.mark.parametrize(("path", "reserved"), [
    ("/tmp", "/tmp"), ("/tmp/data", "/tmp"), ("/dev/shm", "/dev/shm"), ("/dev", "/dev/shm"),
    ("/opt/nbtrain", "/opt/nbtrain"), ("/opt", "/opt/nbtrain"), ("/opt/nbtrain/bundle", "/opt/nbtrain"),
])
def test_a_mount_path_nbtrain_uses_itself_is_refused(make_plan: MakePlan, path: str, reserved: str) -> None:
    with pytest.raises(SpecError, match=re.escape(f"nbtrain mounts {reserved} in every pod itself")):
        make_plan(volumes=(f"data:{path}",))


def test_two_volumes_on_one_mount_path_are_refused(make_plan: MakePlan) -> None:
    with pytest.raises(SpecError, match=re.escape("--volume other:/data: /data is already the mount path of --volume "
                                                  "data:/data")):
        make_plan(volumes=("data:/data", "other:/data"))


def test_a_checkpoint_dir_outside_every_volume_is_refused_naming_the_mounts(make_plan: MakePlan) -> None:
    with pytest.raises(SpecError) as caught:
        make_plan(volumes=("data:/data", "cache:/cache"), checkpoint_dir="/scratch/ckpt")
    message = str(caught.value)
    assert message.startswith("--checkpoint-dir /scratch/ckpt: not under a --volume mount path (/data, /cache)")
    assert "--checkpoint-dir /data/checkpoints" in message, message


def test_a_relative_checkpoint_dir_is_refused_on_kubernetes(make_plan: MakePlan) -> None:
    with pytest.raises(SpecError, match=re.escape("--checkpoint-dir 'ckpt': on Kubernetes it is a path inside the "
                                                  "pods")):
        make_plan(volumes=("data:/data",), checkpoint_dir="ckpt")


def test_volumes_round_trip_through_nbtrain_toml_and_the_store() -> None:
    spec = JobSpec(backend="kubernetes", volumes=("data:/data", "cache:/cache"))
    assert spec_to_toml(spec)["kubernetes"]["volumes"] == ["data:/data", "cache:/cache"]
    assert spec_from_toml(spec_to_toml(spec)).volumes == spec.volumes
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert "volumes" not in spec_to_toml(JobSpec()).get("kubernetes", {})


def test_a_pod_waiting_for_a_claim_that_does_not_exist_is_told_with_the_claims_name() -> None:
    from nbtrain.backends.kubernetes.podstate import missing_claim, pod_info

    def pod(message: str) -> dict[str, Any]:
        return {"metadata": {"name": "run-0", "uid": "u1"}, "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]}}

    waiting = pod_info(pod('0/3 nodes are available: persistentvolumeclaim "team-data" not found. preemption: ...'),
                       "job", "trainer")
    found = missing_claim([waiting])
    assert found is not None and found[1] == "team-data" and found[0].name == "run-0"
    assert missing_claim([pod_info(pod("0/3 nodes are available: 3 Insufficient nvidia.com/gpu."), "job",
                                   "trainer")]) is None


def test_exported_manifests_of_every_flavor_mount_the_volumes(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from nbtrain.bundle import capture_cell
    from nbtrain.export.manifests import kubernetes_manifests

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.setenv("NBTRAIN_K8S_IMAGE", "ghcr.io/org/train:1")
    bundle = capture_cell("6 * 7\n", {"__name__": "__main__"})
    spec = JobSpec(name="exported", backend="kubernetes", volumes=("training-data:/data",), max_restarts=1)
    manifests = kubernetes_manifests(spec, bundle)
    assert manifests.missing == {}
    for flavor, text in manifests.yaml.items():
        assert "claimName: training-data" in text and "mountPath: /data" in text, flavor
        assert "/data/nbtrain-checkpoints/exported" in text, flavor


def test_a_checkpoint_url_is_refused_on_kubernetes_saying_so(make_plan: MakePlan) -> None:
    with pytest.raises(SpecError, match=re.escape("--checkpoint-dir s3://team/ckpt: checkpoints on object storage or "
                                                  "other URLs are not supported on Kubernetes yet")):
        make_plan(volumes=("data:/data",), checkpoint_dir="s3://team/ckpt")
