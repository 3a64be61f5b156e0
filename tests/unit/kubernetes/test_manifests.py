"""Every flavor's manifests: valid for Kubernetes 1.30..newest (strict), CRs valid against their CRDs, and
the checks no schema makes (names, restartPolicy, quantities, restricted profile, secrets, GPU path)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from k8s_unit_helpers import crd_schema, pod_specs, walk

from nbtrain.backends.base import Plan
from nbtrain.backends.kubernetes import KubeOptions
from nbtrain.backends.kubernetes.manifests import KUEUE_QUEUE_LABEL, owned_by
from nbtrain.backends.kubernetes.names import LABEL_RUN_ID, is_dns_label
from nbtrain.errors import SpecError

MakePlan = Callable[..., Plan]
FLAVORS = ("job", "pytorchjob", "jobset")
CR_SCHEMAS = {"PyTorchJob": ("pytorchjobs.yaml", "v1"), "JobSet": ("jobsets.yaml", "v1alpha2")}


def k8s_versions() -> list[str]:
    """1.30 through the newest version kubernetes-validate ships."""
    newest = kubernetes_validate.latest_version()
    major, minor = (int(x) for x in newest.split(".")[:2])
    return [f"{major}.{m}.0" for m in range(30, minor + 1)]


def full_spec(**overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = dict(
        nodes=3, procs_per_node=8, timeout_s=3600.5, queue="team-a", service_account="trainer",
        node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
        cpu="16", memory="128Gi", secret_env={"HF_TOKEN": "hf-credentials/token"}, env={"NCCL_DEBUG": "INFO"},
        volumes=("training-data:/data", "hf-cache.team-a:/cache/hf"), checkpoint_dir="/data/checkpoints",
        max_restarts=2, keep_checkpoints=5, image_pull_secrets=("registry-creds",), priority_class="high-priority",
        shm_size="16Gi", labels={"cost-center": "ml-42", "example.com/team": "vision"},
        annotations={"sidecar.istio.io/inject": "false", "example.com/owner": "Ada Lovelace <ada@example.com>"},
    )
    fields.update(overrides)
    return fields


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
def test_builtin_objects_are_valid_for_every_kubernetes_version_strictly(make_plan: MakePlan, flavor: str, gpu: bool) -> None:
    plan = make_plan(flavor=flavor, **full_spec(device="gpu" if gpu else "cpu"))
    builtin = [o for o in plan.request.objects if o["kind"] not in CR_SCHEMAS]
    assert builtin, "every flavor creates at least its ConfigMap"
    for version in k8s_versions():
        for obj in builtin:
            kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("flavor", ["pytorchjob", "jobset"])
def test_the_pod_templates_inside_custom_resources_are_valid_for_every_kubernetes_version(make_plan: MakePlan, flavor: str) -> None:
    """The CRDs embed core types loosely; wrapped as a PodTemplate (and JobSet's Job spec as a Job), strict."""
    workload = make_plan(flavor=flavor, **full_spec()).request.objects[0]
    wrapped = [{"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": value}
               for path, value in walk(workload) if path.endswith("template") and "containers" in (value.get("spec") or {})]
    if flavor == "jobset":
        job_spec = workload["spec"]["replicatedJobs"][0]["template"]["spec"]
        wrapped.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": job_spec})
    assert wrapped
    for version in k8s_versions():
        for obj in wrapped:
            kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("flavor", ["pytorchjob", "jobset"])
def test_custom_resources_match_their_crd_schema_with_unknown_fields_rejected(make_plan: MakePlan, flavor: str) -> None:
    workload = make_plan(flavor=flavor, **full_spec()).request.objects[0]
    filename, version = CR_SCHEMAS[workload["kind"]]
    assert workload["apiVersion"].endswith("/" + version)
    jsonschema.validate(workload, crd_schema(filename, version))
    broken = yaml.safe_load(yaml.safe_dump(workload))
    broken["spec"]["bogusField"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, crd_schema(filename, version))


def test_the_job_pod_template_is_a_valid_kueue_workload_podset(make_plan: MakePlan) -> None:
    """Kueue copies the Job's pod template into a Workload; it must satisfy that CRD too."""
    job = make_plan(**full_spec()).request.objects[0]
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "job-x"},
        "spec": {"queueName": "team-a", "podSets": [{"name": "main", "count": 3, "template": job["spec"]["template"]}]},
    }
    jsonschema.validate(workload, crd_schema("workloads.yaml", "v1beta2"))


@pytest.mark.parametrize("flavor", FLAVORS)
def test_the_official_client_accepts_every_builtin_object(make_plan: MakePlan, flavor: str) -> None:
    """kubernetes client 37 validates bodies client-side (pydantic): quantities as strings, no unknown fields."""
    from kubernetes import client

    models = {"Job": client.V1Job, "Service": client.V1Service, "ConfigMap": client.V1ConfigMap,
              "Secret": client.V1Secret}
    for obj in make_plan(flavor=flavor, **full_spec()).request.objects:
        if obj["kind"] in models:
            models[obj["kind"]].model_validate(obj)


def test_indexed_job_is_a_gang(make_plan: MakePlan) -> None:
    job, _secret, _configmap, service = make_plan(**full_spec(queue=None)).request.objects
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 3
    assert spec["backoffLimit"] == 0
    assert spec["podReplacementPolicy"] == "Failed"
    assert spec["activeDeadlineSeconds"] == 3601  # --timeout 3600.5 rounded up
    assert spec["ttlSecondsAfterFinished"] == 7 * 24 * 3600  # a week: re-attaching next week still finds logs
    assert "suspend" not in spec
    fail, ignore = spec["podFailurePolicy"]["rules"]
    assert fail == {"action": "FailJob", "onExitCodes": {"containerName": "trainer", "operator": "NotIn", "values": [0]}}
    assert ignore["action"] == "Ignore" and ignore["onPodConditions"][0]["type"] == "DisruptionTarget"
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"].items() <= spec["template"]["metadata"]["labels"].items()
    command = pod["containers"][0]["args"]  # the launcher; the command is the preflight that execs it
    assert command[command.index("--main_process_ip") + 1] == f"{job['metadata']['name']}-0.{service['metadata']['name']}"
    assert command[command.index("--machine_rank") + 1] == "$(NBTRAIN_NODE_RANK)"


@pytest.mark.parametrize("flavor", FLAVORS)
def test_restart_policy_labels_and_owner_references(make_plan: MakePlan, flavor: str) -> None:
    objects = make_plan(flavor=flavor, run_id="digits-3fa9c2", **full_spec()).request.objects
    for obj in objects:
        assert obj["metadata"]["labels"][LABEL_RUN_ID] == "digits-3fa9c2"
        assert obj["metadata"]["annotations"]["nbtrain.dev/run-id"] == "digits-3fa9c2"
    for pod in pod_specs(objects[0]):
        assert pod["restartPolicy"] == "Never"
    for path, value in walk(objects[0]):
        if path.endswith("restartPolicy"):
            assert value == "Never", path
        if path.endswith("template.metadata"):
            assert value["labels"][LABEL_RUN_ID] == "digits-3fa9c2", path
    owner = {**objects[0], "metadata": {**objects[0]["metadata"], "uid": "1234-uid"}}
    for obj in objects[1:]:
        (ref,) = owned_by(obj, owner)["metadata"]["ownerReferences"]
        assert ref == {"apiVersion": objects[0]["apiVersion"], "kind": objects[0]["kind"],
                       "name": objects[0]["metadata"]["name"], "uid": "1234-uid", "controller": False}


@pytest.mark.parametrize("flavor", FLAVORS)
def test_queue_suspends_the_workload_with_the_kueue_label(make_plan: MakePlan, flavor: str) -> None:
    workload = make_plan(flavor=flavor, **full_spec(queue="team-a")).request.objects[0]
    assert workload["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "team-a"
    suspend = workload["spec"]["runPolicy"]["suspend"] if flavor == "pytorchjob" else workload["spec"]["suspend"]
    assert suspend is True


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("nodes", [1, 2, 10, 1024])
def test_names_and_pod_hostnames_fit_63_characters_for_long_run_names(make_plan: MakePlan, flavor: str, nodes: int) -> None:
    long_id = "a-very-long-experiment-name-that-goes-on-and-on-and-on-forever-and-more-7f3a9c"
    request = make_plan(run_id=long_id, flavor=flavor, nodes=nodes, procs_per_node=1, device="cpu").request
    name = request.name
    hostnames = {
        "job": [f"{name}-{i}" for i in range(nodes)],
        "jobset": [f"{name}-node-0-{i}" for i in range(nodes)],
        "pytorchjob": [f"{name}-master-0"] + [f"{name}-worker-{i}" for i in range(nodes - 1)],
    }[flavor]
    for host in hostnames:
        assert is_dns_label(host), host
    assert name[0].isalpha()  # Services (and the operators' Services) need RFC 1035 names
    for obj in request.objects:
        assert is_dns_label(obj["metadata"]["name"]), obj["metadata"]["name"]
        for value in obj["metadata"]["labels"].values():
            assert len(value) <= 63 and re.match(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$", value), value
    other = make_plan(run_id=long_id[:-1] + "d", flavor=flavor, nodes=nodes, procs_per_node=1, device="cpu")
    assert other.request.name != name  # shortened names stay distinct


@pytest.mark.parametrize("flavor", FLAVORS)
def test_quantities_are_strings(make_plan: MakePlan, flavor: str) -> None:
    workload = make_plan(flavor=flavor, **full_spec(cpu="500m", memory="8Gi")).request.objects[0]
    seen = 0
    for path, value in walk(workload):
        if re.search(r"resources\.(limits|requests)\.[^.]+$", path) or path.endswith("resources.limits.nvidia.com/gpu"):
            assert isinstance(value, str), (path, value)
            seen += 1
    assert seen >= 4
    container = pod_specs(workload)[0]["containers"][0]
    assert container["resources"] == {"requests": {"cpu": "500m", "memory": "8Gi"},
                                      "limits": {"memory": "8Gi", "nvidia.com/gpu": "8"}}


@pytest.mark.parametrize("flavor", FLAVORS)
def test_pods_meet_the_restricted_pod_security_profile(make_plan: MakePlan, flavor: str) -> None:
    for pod in pod_specs(make_plan(flavor=flavor, **full_spec()).request.objects[0]):
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] > 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert "hostNetwork" not in pod and "hostPID" not in pod and "hostIPC" not in pod
        for volume in pod["volumes"]:
            assert set(volume) - {"name"} <= {"configMap", "emptyDir", "secret", "projected",
                                              "persistentVolumeClaim", "ephemeral"}, volume  # restricted's list
        assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["volumes"]
        for container in pod["containers"]:
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False
            assert security["capabilities"] == {"drop": ["ALL"]}
            assert security["runAsNonRoot"] is True
            assert security["seccompProfile"] == {"type": "RuntimeDefault"}
            assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
        assert pod["serviceAccountName"] == "trainer"
        assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
        assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.mark.parametrize("flavor", FLAVORS)
def test_secrets_only_by_reference(make_plan: MakePlan, flavor: str) -> None:
    plan = make_plan(flavor=flavor, **full_spec())
    env = pod_specs(plan.request.objects[0])[0]["containers"][0]["env"]
    (hf,) = [e for e in env if e["name"] == "HF_TOKEN"]
    assert hf == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-credentials", "key": "token"}}}
    # the one Secret in a plan is nbtrain's own event-key Secret, and it has no data: the key is made at submit
    (own,) = [o for o in plan.request.objects if o["kind"] == "Secret"]
    assert "data" not in own and "stringData" not in own
    assert own["metadata"]["name"] == plan.request.event_key_secret
    (key,) = [e for e in env if e["name"] == "NBTRAIN_EVENT_KEY"]
    assert key == {"name": "NBTRAIN_EVENT_KEY", "valueFrom": {"secretKeyRef": {
        "name": own["metadata"]["name"], "key": "event-key", "optional": True}}}


def test_the_event_key_goes_only_into_the_secret_sent_to_the_api_and_never_into_what_is_shown(
    make_plan: MakePlan,
) -> None:
    import base64

    from nbtrain.backends.kubernetes.manifests import describe, redacted, with_event_key

    plan = make_plan(**full_spec())
    secret = next(o for o in plan.request.objects if o["kind"] == "Secret")
    key = bytes(range(32))
    sent = with_event_key(secret, key)
    assert base64.b64decode(sent["data"]["event-key"]).decode() == key.hex()
    assert "data" not in secret  # the plan's object is untouched
    assert redacted(sent) == secret
    shown = describe([plan.request.objects[0], sent])
    assert key.hex() not in shown and sent["data"]["event-key"] not in shown
    assert "made at submit" in shown
    assert redacted({"kind": "ConfigMap", "data": {"a": "b"}}) == {"kind": "ConfigMap", "data": {"a": "b"}}


def test_a_secret_env_cannot_replace_nbtrains_own_variables(make_plan: MakePlan) -> None:
    plan = make_plan(secret_env={"NBTRAIN_EVENT_KEY": "mine/key"})
    env = pod_specs(plan.request.objects[0])[0]["containers"][0]["env"]
    (key,) = [e for e in env if e["name"] == "NBTRAIN_EVENT_KEY"]
    assert key["valueFrom"]["secretKeyRef"]["name"] == plan.request.event_key_secret


def test_a_secret_looking_env_value_is_refused_before_it_lands_in_a_manifest(make_plan: MakePlan) -> None:
    with pytest.raises(SpecError, match=r"--secret-env HF_TOKEN=SECRET/KEY") as caught:
        make_plan(env={"HF_TOKEN": "hf_abcdefghijklmnop"})
    assert "hf_abcdefghijklmnop" not in str(caught.value)
    plan = make_plan(env={"HF_TOKEN": "not-really-secret"}, allow_secrets=True)
    assert "not-really-secret" in yaml.safe_dump(plan.request.objects)


def test_gpu_path_requests_gpus_and_uses_nccl(make_plan: MakePlan) -> None:
    """No GPU needed: the GPU manifests are checked as data."""
    job = make_plan(nodes=2, procs_per_node=8, device="auto").request.objects[0]  # default: GPUs on the cluster
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    names = {e["name"] for e in container["env"]}
    assert "ACCELERATE_USE_CPU" not in names  # NCCL, not gloo
    assert "CUDA_VISIBLE_DEVICES" not in names  # the device plugin assigns the GPUs
    command = container["args"]
    assert "--cpu" not in command and "--multi_gpu" in command
    assert command[command.index("--num_processes") + 1] == "16"


def test_cpu_path_forces_gloo(make_plan: MakePlan) -> None:
    plan = make_plan(nodes=2, procs_per_node=2, options=KubeOptions(image="img:1", device="cpu"))
    container = plan.request.objects[0]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "ACCELERATE_USE_CPU", "value": "1"} in container["env"]
    assert "nvidia.com/gpu" not in str(container["resources"])
    assert any("no GPU requested" in n for n in plan.notices)


def test_pod_command_parses_with_accelerates_own_parser_and_prefixes_ranks(make_plan: MakePlan) -> None:
    launch = pytest.importorskip("accelerate.commands.launch")
    container = make_plan(nodes=2, procs_per_node=4).request.objects[0]["spec"]["template"]["spec"]["containers"][0]
    argv = [a.replace("$(NBTRAIN_NODE_RANK)", "1") for a in container["args"]]
    assert argv[1:3] == ["-m", "accelerate.commands.launch"]
    args = launch.launch_command_parser().parse_args(argv[3:])
    assert (args.num_machines, args.machine_rank, args.num_processes) == (2, 1, 8)
    assert args.tee == "3" and args.log_dir
    assert args.training_script == "nbtrain.runtime.worker" and args.module
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] == "[rank${rank}]:"
    assert env["NBTRAIN_EVENT_STREAM"] == "stdout" and env["NBTRAIN_RUN_ID"] == "digits-3fa9c2"
    assert "NBTRAIN_EVENTS_DIR" not in env and "NBTRAIN_LOGS_DIR" not in env and "NBTRAIN_RESULT_PATH" not in env
    assert env["PYTHONPATH"] == "/opt/nbtrain/runtime"
    assert env["NBTRAIN_NODE_RANK"] == {"fieldRef": {
        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}


def test_the_configmap_carries_bundle_and_runtime_and_too_big_goes_in_parts(make_plan: MakePlan, tmp_path: Any) -> None:
    job, _secret, configmap, _ = make_plan().request.objects
    items = {i["path"]: i["key"] for i in job["spec"]["template"]["spec"]["volumes"][0]["configMap"]["items"]}
    assert "bundle/main.py" in items and "bundle/manifest.json" in items
    assert "runtime/nbtrain/runtime/worker.py" in items and "runtime/nbtrain/events.py" in items
    assert all(re.match(r"^[-._a-zA-Z0-9]+$", k) for k in items.values())
    assert set(items.values()) == set(configmap.get("data", {})) | set(configmap.get("binaryData", {}))

    from nbtrain.backends.kubernetes.payload import build_payload

    big = tmp_path / "big"
    big.mkdir()
    (big / "objects.pkl").write_bytes(bytes(range(256)) * 5000)  # 1.2 MiB, binary: over one ConfigMap's limit
    assert build_payload(big, {}).parts  # sent as parts (test_payload_parts.py); refused only over BUNDLE_CAP


def test_user_env_cannot_trigger_kubernetes_expansion(make_plan: MakePlan) -> None:
    container = make_plan(env={"GREETING": "cost $(HOME) and $5"}).request.objects[0]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "GREETING", "value": "cost $$(HOME) and $5"} in container["env"]


@pytest.mark.parametrize(("fields", "flag"), [
    ({"cpu": "eight"}, "--cpu"), ({"memory": "64 GB"}, "--memory"), ({"namespace": "Team_A"}, "--namespace"),
    ({"queue": "bad queue"}, "--queue"), ({"node_selector": {"bad key!": "x"}}, "--node-selector"),
    ({"image": "has space"}, "--image"), ({"secret_env": {"X": "Bad_Name/key"}}, "--secret-env"),
])
def test_values_the_api_would_refuse_are_spec_errors_naming_the_flag(make_plan: MakePlan, fields: dict[str, Any], flag: str) -> None:
    with pytest.raises(SpecError, match=re.escape(flag)):
        make_plan(**fields)


def test_no_image_is_a_spec_error_that_names_both_ways_to_give_one(make_plan: MakePlan) -> None:
    with pytest.raises(SpecError, match=r"--image.*NBTRAIN_K8S_IMAGE"):
        make_plan(options=KubeOptions())


def test_dry_run_describe_is_the_yaml_of_every_object(make_plan: MakePlan) -> None:
    plan = make_plan(flavor="job", **full_spec())
    text = plan.render()
    docs = [d for d in yaml.safe_load_all(text.split("manifests (applied in this order):\n", 1)[1]) if d]
    assert [d["kind"] for d in docs] == ["Job", "Secret", "ConfigMap", "Service"]
    assert docs[0] == plan.request.objects[0]
    assert docs[1] == plan.request.objects[1]  # the event-key Secret, without data
    assert docs[3] == plan.request.objects[3]
    assert f"Secret {plan.request.event_key_secret}" in text
    assert "GPU: nvidia.com/gpu 8 per pod (NCCL)" in text and "namespace default" in text


def test_pods_launch_with_the_attempts_generated_accelerate_config(make_plan: MakePlan) -> None:
    """No Accelerate config in the image (or its HOME) changes a run: the pods get nbtrain's, with the runtime."""
    plan = make_plan()
    configmap = next(o for o in plan.request.objects if o["kind"] == "ConfigMap")
    texts = list((configmap.get("data") or {}).values())
    assert any("distributed_type:" in t and "Generated by nbtrain" in t for t in texts)
    for spec in pod_specs(plan.request.objects[0]):
        argv = spec["containers"][0]["args"]
        assert argv[argv.index("--config_file") + 1].endswith("/runtime/accelerate.yaml")


def test_fsdp_on_cpu_pods_is_refused_before_anything_is_created(make_plan: MakePlan) -> None:
    with pytest.raises(SpecError, match="--strategy fsdp needs GPUs"):
        make_plan(device="cpu", strategy="fsdp", procs_per_node=2)


def test_the_pod_command_is_the_preflight_that_checks_the_image_then_execs_the_launcher(make_plan: MakePlan) -> None:
    import subprocess
    import sys

    from nbtrain.backends.kubernetes.preflight import EXIT_MISSING

    plan = make_plan(nodes=2, procs_per_node=1, options=KubeOptions(image="python:3.11", device="cpu"))
    container = plan.request.objects[0]["spec"]["template"]["spec"]["containers"][0]
    command = container["command"]
    assert command[1:3] == ["-m", "nbtrain_preflight"] and command[-1] == "--"
    assert command[command.index("--image") + 1] == "python:3.11"
    assert command[command.index("--need") + 1] == "accelerate,torch"
    assert container["args"][1:3] == ["-m", "accelerate.commands.launch"]
    configmap = next(o for o in plan.request.objects if o["kind"] == "ConfigMap")
    script = next(v for v in configmap["data"].values() if "nbtrain preflight:" in v)
    # the shipped script, run as the pod runs it: a missing package is named with the image; else it execs
    missing = subprocess.run([sys.executable, "-c", script, "--image", "python:3.11", "--need", "json,no_such_pkg_x",
                              "--", sys.executable, "-c", "print('launched')"], capture_output=True, text=True, timeout=60)
    assert missing.returncode == EXIT_MISSING and missing.stdout == ""
    assert "nbtrain preflight: the image python:3.11 lacks the Python package no_such_pkg_x" in missing.stderr
    ok = subprocess.run([sys.executable, "-c", script, "--image", "python:3.11", "--need", "json",
                         "--", sys.executable, "-c", "print('launched')"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout == "launched\n"


def test_dry_run_shows_the_generated_accelerate_config_and_abridges_the_bundle(make_plan: MakePlan) -> None:
    plan = make_plan(procs_per_node=2, device="gpu", strategy="deepspeed", zero_stage=3, gradient_accumulation=4)
    configmap = plan.request.objects[2]
    (key,) = [k for k in configmap["data"] if k.endswith("-accelerate.yaml")]
    shown = plan.request.describe
    printed = yaml.safe_load(shown.split("---\n")[3])  # the ConfigMap's document, as --dry-run prints it
    assert printed["kind"] == "ConfigMap" and printed["data"][key] == configmap["data"][key]
    config = yaml.safe_load(printed["data"][key])
    assert config["deepspeed_config"]["zero_stage"] == 3 and config["deepspeed_config"]["gradient_accumulation_steps"] == 4
    assert re.fullmatch(r"<\d+ characters>", printed["data"]["b000-main.py"])  # the bundle stays abridged
    assert "zero_stage: 3" in shown  # readable, not an escaped one-line string
