"""The ``trainjob`` flavor: nbtrain's pod as a Kubeflow Trainer v2 TrainJob (``trainer.kubeflow.org/v1alpha1``; pure).

A TrainJob names a runtime (``runtimeRef``: a ClusterTrainingRuntime, or a TrainingRuntime in the run's namespace,
``NBTRAIN_K8S_TRAINJOB_RUNTIME``) whose JobSet template holds the pods; Trainer's controller makes a JobSet named
after the TrainJob from it, with the replicated Job ``node`` (one pod per node, Indexed: pod hostnames
``<trainjob>-node-0-<i>``, rank 0 ``<trainjob>-node-0-0.<trainjob>``) and the trainer container ``node``. Its torch
plugin sets ``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK`` (the completion index), ``PET_MASTER_ADDR``
(that rank-0 name) and ``PET_MASTER_PORT`` on it: the same rendezvous nbtrain's ``accelerate launch`` is given.

nbtrain's pod template (:func:`.pod.pod_template`) is put where a TrainJob takes each part, and nothing is dropped:

- ``spec.trainer``: the container's image, command, args, env and resources (``resourcesPerNode``), ``numNodes``
  and ``numProcPerNode``;
- ``spec.runtimePatches`` (one entry, manager ``nbtrain.dev/nbtrain``): the labels and annotations of the JobSet, the
  ``node`` Job and its pods (nbtrain's run-id and attempt labels select the pods), the pod's volumes, security
  context, service account, node selector, tolerations, image pull secrets, affinity and grace period, and the
  container's volume mounts and security context (Trainer refuses env in a patch of ``node``: env is the trainer's);
- ``--timeout`` as ``spec.activeDeadlineSeconds`` (Trainer fails the TrainJob with reason ``DeadlineExceeded``);
  ``--queue`` as Kueue's label and ``spec.suspend``.

What a TrainJob cannot carry is refused (:class:`SpecError` naming the option) or left to the runtime, as
docs/kubernetes.md says: ``--priority-class`` and ``--spread-by`` (no such patch field), containers, init containers
or other pod fields a ``--pod-template`` adds, ``PET_*`` in ``--env`` (Trainer's own). The runtime's template keeps
``restartPolicy``, ``automountServiceAccountToken``, ``enableServiceLinks``, ``imagePullPolicy`` and the Job's
failure policy; the working directory is the preflight's ``--cwd /tmp``. A TrainJob has no
``ttlSecondsAfterFinished``: it stays until deleted (:func:`notices`). ``trainjob-runtime.yaml`` (:func:`gang_runtime`)
is a runtime that fails the gang at its first failure and deletes its JobSet after 7 days.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from nbtrain.backends.kubernetes import names as nm
from nbtrain.errors import SpecError
from nbtrain.spec import JobSpec

__all__ = ["API_VERSION", "PATCH_MANAGER", "RESERVED_ENV", "RUNTIME_FILE", "RuntimeRef", "gang_runtime", "notices",
           "runtime_ref", "train_job"]

API_VERSION = "trainer.kubeflow.org/v1alpha1"
GROUP = "trainer.kubeflow.org"
PATCH_MANAGER = "nbtrain.dev/nbtrain"  # a domain-prefixed path, as Trainer's webhook requires
#: Trainer's torch plugin sets these on the trainer container and its webhook refuses them in ``spec.trainer.env``.
RESERVED_ENV = frozenset({"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"})
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
ENV_RUNTIME = "NBTRAIN_K8S_TRAINJOB_RUNTIME"
RUNTIME_FILE = "trainjob-runtime.yaml"  # the runtime nbtrain recommends (nbtrain-torch), shipped next to this module

# Where each field of nbtrain's pod goes. Pod fields Trainer's PodSpecPatch takes:
_POD_PATCHED = frozenset({"securityContext", "serviceAccountName", "nodeSelector", "tolerations", "imagePullSecrets",
                          "terminationGracePeriodSeconds", "affinity", "volumes", "schedulingGates"})
# Pod fields nbtrain always sets that the runtime's template decides for a TrainJob (documented in docs/kubernetes.md):
_POD_RUNTIME = frozenset({"restartPolicy", "automountServiceAccountToken", "enableServiceLinks", "containers"})
_CONTAINER_TRAINER = frozenset({"image", "command", "args", "env", "resources"})  # spec.trainer
_CONTAINER_PATCHED = frozenset({"volumeMounts", "securityContext"})  # the runtime patch's container
# set by nbtrain on every pod, decided by the runtime here: the name is the runtime's ("node"), ports are the torch
# plugin's (29500), imagePullPolicy the runtime's, workingDir the preflight's --cwd
_CONTAINER_RUNTIME = frozenset({"name", "ports", "imagePullPolicy", "workingDir"})
#: Options whose pod field a TrainJob cannot carry.
_REFUSED_BY = {"priorityClassName": "--priority-class", "topologySpreadConstraints": "--spread-by"}


@dataclass(frozen=True)
class RuntimeRef:
    """The Trainer runtime a TrainJob names."""

    kind: str  # ClusterTrainingRuntime or TrainingRuntime
    name: str

    def as_field(self) -> dict[str, str]:
        """The TrainJob's ``spec.runtimeRef``."""
        return {"apiGroup": GROUP, "kind": self.kind, "name": self.name}


def runtime_ref(text: str) -> RuntimeRef:
    """``NBTRAIN_K8S_TRAINJOB_RUNTIME``: ``NAME`` (a ClusterTrainingRuntime) or ``KIND/NAME``; SpecError otherwise."""
    kind, slash, name = text.strip().rpartition("/")
    kind = kind if slash else "ClusterTrainingRuntime"
    if kind not in RUNTIME_KINDS or not _dns_subdomain(name):
        raise SpecError(f"{ENV_RUNTIME}={text!r}: expected NAME (a ClusterTrainingRuntime, e.g. torch-distributed), "
                        "ClusterTrainingRuntime/NAME or TrainingRuntime/NAME (one in the run's namespace); "
                        "kubectl get clustertrainingruntimes lists those installed.")
    return RuntimeRef(kind, name)


def _dns_subdomain(text: str) -> bool:
    return 0 < len(text) <= 253 and all(nm.is_dns_label(part) for part in text.split("."))


def _refuse(what: str, option: str | None) -> SpecError:
    said = option or "--pod-template"
    return SpecError(f"{said}: --flavor trainjob cannot carry the pod's {what} (a TrainJob takes only the fields of "
                     "its spec.trainer and spec.runtimePatches; the rest is its runtime's): drop "
                     f"{said} for this flavor, set it in the Trainer runtime ({ENV_RUNTIME}), or use "
                     "--flavor job or jobset.")


def _split_pod(spec: JobSpec, template: Mapping[str, Any], container_name: str) -> tuple[dict[str, Any], dict[str, Any],
                                                                                          dict[str, Any]]:
    """(trainer fields, the pod spec patch, the container patch) of ``template``; SpecError for what has no place."""
    pod = template["spec"]
    containers = pod.get("containers") or []
    if len(containers) != 1 or containers[0].get("name") != container_name:
        extra = ", ".join(str(c.get("name")) for c in containers if c.get("name") != container_name)
        raise _refuse(f"extra containers ({extra})", None)
    for field_name in pod:
        if field_name not in _POD_PATCHED | _POD_RUNTIME:
            raise _refuse(field_name, _REFUSED_BY.get(field_name))
    container = containers[0]
    for field_name in container:
        if field_name not in _CONTAINER_TRAINER | _CONTAINER_PATCHED | _CONTAINER_RUNTIME:
            raise _refuse(f"container field {field_name}", None)
    for item in container.get("env") or []:
        if item["name"] in RESERVED_ENV:
            raise SpecError(f"--env {item['name']}: Kubeflow Trainer sets {item['name']} itself on a TrainJob's pods "
                            f"(its torch plugin: {', '.join(sorted(RESERVED_ENV))}) and refuses it in the TrainJob; "
                            "drop it (nbtrain's launch passes the rendezvous to accelerate itself).")
    trainer = {key: container[key] for key in ("image", "command", "args", "env") if container.get(key)}
    if container.get("resources"):
        trainer["resourcesPerNode"] = container["resources"]
    pod_patch = {key: value for key, value in pod.items() if key in _POD_PATCHED}
    container_patch = {"name": container_name, **{k: v for k, v in container.items() if k in _CONTAINER_PATCHED}}
    return trainer, pod_patch, container_patch


def _meta(labels: Mapping[str, str], annotations: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {"labels": dict(labels)}
    if annotations:
        out["annotations"] = dict(annotations)
    return out


def train_job(spec: JobSpec, template: Mapping[str, Any], *, metadata: dict[str, Any], runtime: RuntimeRef,
              container_name: str, labels: Mapping[str, str], annotations: Mapping[str, str],
              suspend: bool) -> dict[str, Any]:
    """The TrainJob of one attempt: ``template`` (nbtrain's pod) spread over ``spec.trainer`` and one runtime patch.

    ``metadata``: the TrainJob's own; ``labels``/``annotations``: what the JobSet, the ``node`` Job and the pods carry
    (nbtrain's run-id and attempt labels among them). Raises SpecError for a pod field a TrainJob cannot carry.
    """
    trainer, pod_patch, container_patch = _split_pod(spec, template, container_name)
    pod_meta = template.get("metadata") or {}
    pod_patch["containers"] = [container_patch]
    node_patch = {
        "name": nm.JOBSET_REPLICATED_JOB,
        "template": {
            "metadata": _meta(labels, annotations),
            "spec": {"template": {"metadata": _meta(pod_meta.get("labels") or {}, pod_meta.get("annotations") or {}),
                                  "spec": pod_patch}},
        },
    }
    job_spec: dict[str, Any] = {
        "runtimeRef": runtime.as_field(),
        "trainer": {**trainer, "numNodes": spec.nodes, "numProcPerNode": spec.procs},
        "runtimePatches": [{
            "manager": PATCH_MANAGER,
            "trainingRuntimeSpec": {"template": {"metadata": _meta(labels, annotations),
                                                 "spec": {"replicatedJobs": [node_patch]}}},
        }],
    }
    if spec.timeout_s is not None:
        job_spec["activeDeadlineSeconds"] = max(1, math.ceil(spec.timeout_s))
    if suspend:
        job_spec["suspend"] = True
    return {"apiVersion": API_VERSION, "kind": "TrainJob", "metadata": metadata, "spec": job_spec}


def notices(runtime: RuntimeRef, name: str, namespace: str) -> list[str]:
    """What a TrainJob run does differently, said once when it is submitted."""
    return [f"TrainJob on the Trainer runtime {runtime.kind} {runtime.name}: a TrainJob has no ttlSecondsAfterFinished, "
            f"so it stays (with its finished pods, unless the runtime's JobSet sets a TTL) until deleted: "
            f"kubectl delete trainjob {name} -n {namespace}"]


def gang_runtime() -> dict[str, Any]:
    """The ClusterTrainingRuntime ``nbtrain-torch`` shipped in ``trainjob-runtime.yaml``: Trainer's torch runtime with
    what makes a gang end at its first failure (see the file's comments)."""
    text = (resources.files("nbtrain.backends.kubernetes") / RUNTIME_FILE).read_text(encoding="utf-8")
    loaded: dict[str, Any] = yaml.safe_load(text)
    return loaded
