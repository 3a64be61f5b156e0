"""The pod every flavor runs: one ``accelerate launch`` per node, as a restricted, non-root pod (pure).

What the pod gets and why:

- the command is the preflight (:mod:`.preflight`: the image has accelerate and torch, else one line naming
  what is missing and the image, exit 3), which execs the launcher in ``args``;
- the launcher is built by :mod:`nbtrain.backends.launch` (the one place that knows accelerate's flags),
  with ``--tee 3`` and ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=[rank${rank}]:`` so each line of the
  pod log carries its global rank (``$(VAR)`` is Kubernetes' own expansion, ``${rank}`` torchelastic's);
- the bundle and the runtime from the ConfigMap (``PYTHONPATH`` points at the runtime, so images without
  nbtrain work), events as tagged stdout lines (``NBTRAIN_EVENT_STREAM=stdout``; no shared disk), keyed by
  the attempt's event key from its Secret (``NBTRAIN_EVENT_KEY`` by ``secretKeyRef``, never a value in the
  manifest; ``optional`` so that exported manifests applied by hand start without one);
- ``NBTRAIN_RUN_ID`` in the environment of every process of the gang;
- GPUs as limits of ``--gpu-resource`` (``nvidia.com/gpu`` by default; strings) and torch's GPU backend (NCCL, RCCL
  on ROCm; no ``ACCELERATE_USE_CPU``, no ``CUDA_VISIBLE_DEVICES``: the device plugin assigns the GPUs), or CPU mode
  over gloo;
- ``--spread-by KEY`` as a topologySpreadConstraint over the attempt's pods (maxSkew 1, DoNotSchedule);
- ``--image-pull-secret``, ``--priority-class``, ``--label`` and ``--annotation`` as the pod's ``imagePullSecrets``,
  ``priorityClassName``, labels and annotations (the workload and its objects carry the labels and annotations too);
- secrets only as ``secretKeyRef``; ``automountServiceAccountToken: false``; the Pod Security
  "restricted" profile (non-root, no privilege escalation, drop ALL, RuntimeDefault seccomp), as uid, gid and
  fsGroup ``NBTRAIN_K8S_RUN_AS_USER``, or with no ids at all when it is ``auto`` (OpenShift assigns them);
- ``/dev/shm`` as a memory emptyDir (the container runtime's 64 MiB default breaks DataLoader workers; ``--shm-size``
  is its ``sizeLimit``)
  and a writable ``/tmp`` (HOME, TMPDIR and torchelastic's log dir);
- each ``--volume CLAIM:/path`` as a ``persistentVolumeClaim`` volume mounted read-write at its path; with
  volumes the ranks get ``NBTRAIN_CHECKPOINT_DIR`` (``--checkpoint-dir``, else ``nbtrain-checkpoints`` on the
  first volume, then the run id) and ``NBTRAIN_KEEP_CHECKPOINTS``: every attempt's pods share it, which is
  what restarts and resume restore from;
- last, ``--pod-template`` merged in with Kubernetes' strategic-merge rules, refused where it would break any of the
  above (:mod:`.override`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbtrain.backends.extras import strategy_packages
from nbtrain.backends.kubernetes import names as nm
from nbtrain.backends.kubernetes.config import KubeOptions
from nbtrain.backends.kubernetes.override import PodOverride, apply_override
from nbtrain.backends.kubernetes.payload import MOUNT_PATH, RUNTIME_PATH, Payload
from nbtrain.backends.launch import LaunchTarget, accelerate_argv, device_env
from nbtrain.runtime import context as rt
from nbtrain.runtime.checkpoint import ENV_CHECKPOINT_DIR
from nbtrain.runtime.checkpoint import ENV_KEEP as ENV_KEEP_CHECKPOINTS
from nbtrain.spec import JobSpec, split_volume

__all__ = ["CHECKPOINTS_ON_VOLUME", "CONTAINER", "EVENT_KEY_FIELD", "PREFLIGHT_MODULE", "PodInputs", "checkpoint_root",
           "container_name", "pod_template", "preflight_files", "spread_constraint"]

CONTAINER = "trainer"
PYTORCHJOB_CONTAINER = "pytorch"  # the training operator requires this name
TRAINJOB_CONTAINER = "node"  # Kubeflow Trainer v2: the trainer container of a runtime (its constants.Node)
PYTORCHJOB_PORT_NAME = "pytorchjob-port"
LINE_PREFIX = "[rank${rank}]:"
TEE_LOG_DIR = "/tmp/nbtrain-elastic"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
EVENT_KEY_FIELD = "event-key"  # the key of the event key in its Secret's data
PREFLIGHT_MODULE = "nbtrain_preflight"  # preflight.py, shipped next to the runtime
CHECKPOINTS_ON_VOLUME = "nbtrain-checkpoints"  # the checkpoint directory on the first volume without --checkpoint-dir


def preflight_files() -> dict[str, bytes]:
    """The preflight script, as the runtime files it is shipped with (``{path under the runtime: content}``)."""
    return {f"{PREFLIGHT_MODULE}.py": Path(__file__).with_name("preflight.py").read_bytes()}


def container_name(flavor: str) -> str:
    """The trainer container's name for ``flavor``."""
    return {"pytorchjob": PYTORCHJOB_CONTAINER, "trainjob": TRAINJOB_CONTAINER}.get(flavor, CONTAINER)


def _escape(value: str) -> str:
    """Keep Kubernetes from expanding ``$(NAME)`` in user-given values (``$$`` is a literal ``$``)."""
    return value.replace("$(", "$$(")


@dataclass(frozen=True)
class PodInputs:
    """Everything the pod template depends on besides the JobSpec."""

    run_id: str
    attempt: int
    image: str
    use_gpu: bool
    flavor: str
    main_address: str
    configmap: str
    payload: Payload
    labels: dict[str, str]
    options: KubeOptions
    event_key_secret: str  # the Secret that holds the attempt's event key (filled in at submit)
    config_file: str | None = None  # the attempt's generated Accelerate config, as the pod sees it
    override: PodOverride | None = None  # --pod-template, merged into the template (.override)


def launcher_argv(spec: JobSpec, inputs: PodInputs) -> list[str]:
    """The container's command: this node's ``accelerate launch`` of the nbtrain worker."""
    node_rank = "$(RANK)" if inputs.flavor == "pytorchjob" else "$(NBTRAIN_NODE_RANK)"
    return accelerate_argv(
        spec, python=inputs.options.python, use_gpu=inputs.use_gpu, node_rank=node_rank,
        main_address=inputs.main_address, main_port=inputs.options.port,
        target=LaunchTarget("nbtrain.runtime.worker", (inputs.payload.bundle_path,)), config_file=inputs.config_file, tee="3",
        log_dir=TEE_LOG_DIR,
    )


def preflight_argv(spec: JobSpec, inputs: PodInputs) -> list[str]:
    """The container's command: the preflight (:mod:`.preflight`, shipped as ``nbtrain_preflight`` on ``PYTHONPATH``),
    which checks the image's Python packages (the strategy's too: DeepSpeed, :mod:`nbtrain.backends.extras`) and
    then execs the launcher given as the container's ``args``."""
    need = ["accelerate", "torch"] + (["cloudpickle"] if "bundle/objects.pkl" in inputs.payload.sizes else [])
    need += strategy_packages(spec)
    # a TrainJob cannot set the container's workingDir (the runtime's template has the container): the preflight
    # changes to the writable /tmp before it execs the launcher, as workingDir does for the other flavors
    cwd = ["--cwd", "/tmp"] if inputs.flavor == "trainjob" else []
    return [inputs.options.python, "-m", PREFLIGHT_MODULE, "--image", _escape(inputs.image), "--need", ",".join(need),
            *cwd, *inputs.payload.preflight_args(), "--"]


def checkpoint_root(spec: JobSpec, run_id: str) -> str | None:
    """The run's checkpoint root as the pods see it (on a volume), or None without ``--volume``."""
    if not spec.volumes:
        return None
    base = spec.checkpoint_dir or f"{split_volume(spec.volumes[0])[1]}/{CHECKPOINTS_ON_VOLUME}"
    return f"{base.rstrip('/')}/{run_id}"


def _volumes(spec: JobSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's ``volumes`` and the container's ``volumeMounts`` of ``--volume``."""
    volumes, mounts = [], []
    for index, text in enumerate(spec.volumes):
        claim, path = split_volume(text)
        volumes.append({"name": f"volume-{index}", "persistentVolumeClaim": {"claimName": claim}})
        mounts.append({"name": f"volume-{index}", "mountPath": path})
    return volumes, mounts


def _env(spec: JobSpec, inputs: PodInputs) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": rt.ENV_RUN_ID, "value": inputs.run_id},
        {"name": rt.ENV_ATTEMPT, "value": str(inputs.attempt)},
        {"name": rt.ENV_EVENT_STREAM, "value": "stdout"},
        {"name": rt.ENV_EVENT_KEY, "valueFrom": {"secretKeyRef": {
            "name": inputs.event_key_secret, "key": EVENT_KEY_FIELD, "optional": True}}},
        {"name": rt.ENV_COLLECTIVE_TIMEOUT, "value": f"{spec.collective_timeout_s:g}"},
        {"name": rt.ENV_TRACKED, "value": "1" if spec.tracking else "0"},
    ]
    checkpoints = checkpoint_root(spec, inputs.run_id)
    if checkpoints is not None:
        env += [{"name": ENV_CHECKPOINT_DIR, "value": checkpoints},
                {"name": ENV_KEEP_CHECKPOINTS, "value": str(spec.keep_checkpoints)}]
    if inputs.flavor != "pytorchjob":  # the operator sets RANK to the node index instead
        env.append({"name": rt.ENV_NODE_RANK, "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"}}})
    env += [
        {"name": "PYTHONPATH", "value": RUNTIME_PATH},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "HOME", "value": "/tmp"},
        {"name": "TMPDIR", "value": "/tmp"},
        {"name": "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "value": LINE_PREFIX},
    ]
    devices = device_env(inputs.use_gpu)
    if inputs.use_gpu:
        # the device plugin exposes this pod's GPUs; hiding them (CUDA_VISIBLE_DEVICES="") would break NCCL
        devices.pop("CUDA_VISIBLE_DEVICES", None)
        devices.pop("ACCELERATE_USE_CPU", None)
    env += [{"name": k, "value": v} for k, v in devices.items()]
    if spec.cpu and "OMP_NUM_THREADS" not in spec.env:
        threads = _cpu_threads(spec.cpu, spec.procs)
        if threads:
            env.append({"name": "OMP_NUM_THREADS", "value": str(threads)})
    names = {e["name"] for e in env}
    env += [{"name": k, "value": _escape(v)} for k, v in sorted(spec.env.items()) if k not in names]
    for name, ref in sorted(spec.secret_env.items()):
        if name in names:
            continue  # nbtrain's own variables (the event key among them) are not the user's to replace
        secret, _, key = ref.partition("/")
        env.append({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
    return env


def _cpu_threads(cpu: str, procs: int) -> int | None:
    try:
        cores = float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
    except ValueError:
        return None
    return max(1, int(cores // max(1, procs)))


def _resources(spec: JobSpec, inputs: PodInputs) -> dict[str, Any]:
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if spec.cpu:
        requests["cpu"] = str(spec.cpu)
    if spec.memory:
        requests["memory"] = limits["memory"] = str(spec.memory)
    if inputs.use_gpu:
        limits[spec.gpu_resource] = str(spec.procs)  # quantities are strings (client 37 refuses ints)
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def spread_constraint(topology_key: str, labels: dict[str, str]) -> dict[str, Any]:
    """``--spread-by``: the attempt's pods (selected by its run-id and attempt labels) spread evenly over
    ``topology_key``'s domains, at most one more in any domain than in the least loaded, else Pending. The domains
    are those of the nodes the pods may run on (their node selector and affinity, and taints they tolerate: a tainted
    CPU node must not count as an empty domain)."""
    selector = {key: labels[key] for key in (nm.LABEL_RUN_ID, nm.LABEL_ATTEMPT)}
    return {"maxSkew": 1, "topologyKey": topology_key, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": selector}, "nodeAffinityPolicy": "Honor", "nodeTaintsPolicy": "Honor"}


def _pod_security(uid: int | None) -> dict[str, Any]:
    """The pod's securityContext: restricted, as ``uid`` (also its gid and fsGroup), or, with None
    (``NBTRAIN_K8S_RUN_AS_USER=auto``), without ids: OpenShift's ``restricted-v2`` SCC refuses ids outside the
    namespace's range and fills in its own, and ``runAsNonRoot`` still makes the kubelet refuse a root user."""
    ids = {} if uid is None else {"runAsUser": uid, "runAsGroup": uid, "fsGroup": uid}
    return {"runAsNonRoot": True, **ids, "seccompProfile": {"type": "RuntimeDefault"}}


def pod_template(spec: JobSpec, inputs: PodInputs, *, subdomain: str | None) -> dict[str, Any]:
    """The PodTemplateSpec shared by every flavor (``subdomain``: the headless Service, Job flavor)."""
    volumes, mounts = _volumes(spec)
    container: dict[str, Any] = {
        "name": container_name(inputs.flavor),
        "image": inputs.image,
        "imagePullPolicy": "IfNotPresent",
        "command": preflight_argv(spec, inputs),
        "args": launcher_argv(spec, inputs),
        "env": _env(spec, inputs),
        "ports": [{
            "name": PYTORCHJOB_PORT_NAME if inputs.flavor == "pytorchjob" else "rendezvous",
            "containerPort": inputs.options.port, "protocol": "TCP",
        }],
        "resources": _resources(spec, inputs),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"name": "nbtrain", "mountPath": MOUNT_PATH, "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "tmp", "mountPath": "/tmp"},
            *mounts,
        ],
        "workingDir": "/tmp",
    }
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,  # one env var per Service in the namespace is noise (and can be huge)
        "terminationGracePeriodSeconds": 15,
        "securityContext": _pod_security(inputs.options.run_as_user),
        "containers": [container],
        "volumes": [
            {"name": "nbtrain", **inputs.payload.volume(inputs.configmap)},
            {"name": "dshm", "emptyDir": {"medium": "Memory", **({"sizeLimit": spec.shm_size} if spec.shm_size else {})}},
            {"name": "tmp", "emptyDir": {}},
            *volumes,
        ],
    }
    if subdomain:
        pod["subdomain"] = subdomain
    if spec.service_account:
        pod["serviceAccountName"] = spec.service_account
    if spec.node_selector:
        pod["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod["tolerations"] = [dict(t) for t in spec.tolerations]
    if spec.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": name} for name in spec.image_pull_secrets]
    if spec.priority_class:
        pod["priorityClassName"] = spec.priority_class
    if spec.spread_by:
        pod["topologySpreadConstraints"] = [spread_constraint(spec.spread_by, inputs.labels)]
    metadata: dict[str, Any] = {"labels": {**spec.labels, **inputs.labels}}
    if spec.annotations:
        metadata["annotations"] = dict(spec.annotations)
    template = {"metadata": metadata, "spec": pod}
    if inputs.override is None:
        return template
    return apply_override(template, inputs.override, trainer=container_name(inputs.flavor),
                          gpu_resource=spec.gpu_resource, allow_secrets=spec.allow_secrets)
