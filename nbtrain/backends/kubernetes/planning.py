"""The pure steps of the Kubernetes dry run (``KubernetesBackend._plan``): what each decides, in the order it runs.

1. :func:`image_of`: the container image (``--image``, else ``NBTRAIN_K8S_IMAGE``), refused when there is none;
2. :func:`device_of`: GPUs or CPU for the pods (``--device``, ``--gpus``, ``NBTRAIN_K8S_DEVICE``) and the notice
   a CPU gang gets;
3. :func:`build_manifests`: the payload (bundle, nbtrain runtime, preflight and the generated Accelerate config,
   which travels with the runtime so no config in the image changes the run), the pod inputs and every object to
   apply, the bundle's part ConfigMaps included;
4. :func:`describe_plan`: what ``--dry-run`` prints after the generic lines.

Nothing here calls the API or writes a file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from nbtrain.backends.accelerate_config import CONFIG_NAME
from nbtrain.backends.kubernetes import manifests as mf
from nbtrain.backends.kubernetes.config import KubeOptions
from nbtrain.backends.kubernetes.names import ObjectNames
from nbtrain.backends.kubernetes.override import read_pod_template
from nbtrain.backends.kubernetes.payload import RUNTIME_PATH, Payload, build_payload
from nbtrain.backends.kubernetes.pod import PodInputs, checkpoint_root, preflight_files
from nbtrain.errors import SpecError
from nbtrain.runtime.shipping import runtime_files
from nbtrain.spec import Device, JobSpec

__all__ = ["Built", "build_manifests", "describe_plan", "device_of", "image_of"]


def image_of(spec: JobSpec, options: KubeOptions) -> str:
    """The pods' image; SpecError when neither ``--image`` nor ``NBTRAIN_K8S_IMAGE`` names one."""
    image = spec.image or options.image
    if not image:
        raise SpecError(
            "--image: the kubernetes backend needs a container image with Python, torch and accelerate "
            "(nbtrain itself is not needed); pass --image or set NBTRAIN_K8S_IMAGE."
        )
    return image


def device_of(spec: JobSpec, options: KubeOptions) -> tuple[bool, list[str]]:
    """Whether the pods ask for GPUs, and the notice of a CPU gang (none for GPUs).

    SpecError for ``--device gpu`` with ``--gpus 0``. ``--device auto`` follows ``NBTRAIN_K8S_DEVICE`` (the
    cluster's default device), ``--gpus 0`` is CPU."""
    if spec.device is Device.GPU and spec.procs_per_node == 0:
        raise SpecError("--device gpu with --gpus 0: ask for at least one GPU per pod (--gpus 1).")
    use_gpu = spec.procs_per_node > 0 and (
        spec.device is Device.GPU or (spec.device is Device.AUTO and options.device == "gpu"))
    if use_gpu:
        return True, []
    why = "--device cpu" if spec.device is Device.CPU else (
        "--gpus 0" if spec.procs_per_node == 0 else "NBTRAIN_K8S_DEVICE=cpu")
    return False, [f"no GPU requested: {spec.nodes} pod(s) x {spec.procs} CPU process(es) over gloo ({why})"]


@dataclass(frozen=True)
class Built:
    """The objects of one attempt and what went into them."""

    objects: tuple[dict[str, Any], ...]
    inputs: PodInputs
    secret: str  # the event-key Secret's name


def build_manifests(spec: JobSpec, *, run_id: str, attempt: int, image: str, use_gpu: bool, names: ObjectNames,
                    namespace: str, options: KubeOptions, bundle_dir: str, bundle_digest: str,
                    config_text: str) -> Built:
    """Every object of the attempt, in the order ``submit`` applies them (the workload first).

    Raises SpecError for a bundle over the ConfigMap limits or a ``--pod-template`` nbtrain cannot merge."""
    payload = build_payload(bundle_dir, {**runtime_files(), **preflight_files(),
                                         CONFIG_NAME: config_text.encode("utf-8")}, configmap=names.configmap)
    secret = mf.event_key_secret_name(names.base)
    inputs = PodInputs(
        run_id=run_id, attempt=attempt, image=image, use_gpu=use_gpu, flavor=spec.flavor,
        main_address=names.main_address, configmap=names.configmap, payload=payload,
        labels=mf.labels_for(run_id, attempt), options=options, event_key_secret=secret,
        config_file=f"{RUNTIME_PATH}/{CONFIG_NAME}",
        override=read_pod_template(spec.pod_template) if spec.pod_template else None,
    )
    objects = mf.build_objects(spec, names=names, namespace=namespace, inputs=inputs, bundle_digest=bundle_digest)
    if payload.parts:  # a bundle too big for one ConfigMap: its parts, owned by the workload like the first
        first = next(o for o in objects if o["kind"] == "ConfigMap")
        objects += payload.part_configmaps(first)
    return Built(tuple(objects), inputs, secret)


def describe_plan(spec: JobSpec, built: Built, *, run_id: str, names: ObjectNames, namespace: str, image: str,
                  options: KubeOptions) -> str:
    """What ``--dry-run`` prints of a Kubernetes plan: where, what, the device, the bundle and the manifests."""
    workload = mf.WORKLOAD_KINDS[spec.flavor]
    inputs = built.inputs
    collectives = "NCCL" if spec.gpu_resource == "nvidia.com/gpu" else "the device's torch.distributed backend"
    device = (f"GPU: {spec.gpu_resource} {spec.procs} per pod ({collectives})" if inputs.use_gpu else "CPU (gloo)")
    return "\n".join([
        f"cluster:   namespace {namespace}" + (f", context {options.context}" if options.context else ""),
        f"workload:  {workload.kind} {names.base} ({spec.flavor}); image {image}",
        f"device:    {device}",
        f"rendezvous: {names.main_address}:{options.port}",
        _bundle_line(inputs.payload, names),
        f"events:    pod stdout lines tagged with a per-attempt key, made at submit, in Secret {built.secret}",
        *([f"volumes:   {', '.join(spec.volumes)}; checkpoints in {checkpoint_root(spec, run_id)}"
           + (f"; up to {spec.max_restarts} automatic restart(s), each a new {workload.kind}"
              if spec.max_restarts else "")] if spec.volumes else []),
        *([f"pod template: {spec.pod_template}, merged into every pod (strategic merge):",
           _indented(inputs.override.fragment)] if inputs.override is not None else []),
        "manifests (applied in this order):",
        mf.describe(list(built.objects)),
    ])


def _bundle_line(payload: Payload, names: ObjectNames) -> str:
    """The plan's ``bundle:`` line: one ConfigMap, or the part ConfigMaps and the runtime's."""
    if not payload.parts:
        return f"bundle:    ConfigMap {names.configmap}, {payload.size / 1024:.0f} KiB (bundle + nbtrain runtime)"
    return (f"bundle:    {len(payload.parts)} part ConfigMaps {payload.part_name(0)}.. "
            f"({sum(map(len, payload.parts)) / 2**20:.1f} MiB .tar.gz, sha256 "
            f"{payload.archive_sha256[:12]}…, checked and unpacked by each pod's preflight) and "
            f"ConfigMap {names.configmap}, {payload.size / 1024:.0f} KiB (nbtrain runtime)")


def _indented(fragment: Mapping[str, Any]) -> str:
    """A ``--pod-template`` fragment as the plan shows it (YAML, indented)."""
    text = yaml.safe_dump(dict(fragment), sort_keys=False, default_flow_style=False, width=120)
    return "\n".join(f"  {line}" for line in text.splitlines())
