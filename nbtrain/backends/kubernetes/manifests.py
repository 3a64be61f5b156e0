"""What a run creates on the cluster, per flavor, as plain API objects (pure; no I/O, no client import).

``build_objects`` returns the objects in creation order: the workload (Job, PyTorchJob, JobSet or TrainJob)
first, then what it owns (the event-key Secret, the ConfigMap, and the headless Service for the Job
flavor). Owned objects get their ``ownerReferences`` at submit time, from the workload's uid
(:func:`owned_by`), so deleting the workload garbage-collects them. Field names are the API's;
quantities are strings.

The event-key Secret is built without its data: the key is made at submit and put in only on the
object sent to the API (:func:`with_event_key`), so no plan, ``--dry-run`` output, exported manifest or
``manifests.yaml`` holds it (:func:`redacted`). It comes before the ConfigMap, so it exists before any pod
can start (pods wait for their ConfigMap volume).

Job flavor (any cluster >= 1.30): an Indexed Job (completions = parallelism = nodes) is not a gang by
itself, so any non-zero exit of the trainer container fails the whole Job (podFailurePolicy FailJob),
disruptions (preemption, node drain) are ignored and the pod replaced only once it is gone
(podReplacementPolicy Failed), and ``backoffLimit: 0`` fails the Job on any other pod failure: a
replacement pod could not rejoin a static rendezvous anyway.

PyTorchJob flavor: ``cleanPodPolicy: Running``, so the operator deletes what still runs of a finished gang and keeps
the finished pods (and their logs) until the TTL. JobSet flavor (JobSet >= 0.6): ``maxRestarts: 0`` and one
failure-policy rule, :data:`JOBSET_DEADLINE_RULE`, so that a run past ``--timeout`` is told apart from other failures.
TrainJob flavor (Kubeflow Trainer v2): the pod spread over the TrainJob's trainer fields and one runtime patch
(:mod:`.trainjob`); the Job's failure policy and TTL are its runtime's.
"""

from __future__ import annotations

import base64
import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from nbtrain.backends.accelerate_config import CONFIG_NAME
from nbtrain.backends.kubernetes import names as nm
from nbtrain.backends.kubernetes import trainjob as tj
from nbtrain.backends.kubernetes.pod import EVENT_KEY_FIELD, PodInputs, container_name, pod_template
from nbtrain.events import encode_event_key
from nbtrain.spec import JobSpec

__all__ = [
    "JOBSET_DEADLINE_RULE", "KUEUE_PRIORITY_LABEL", "KUEUE_QUEUE_LABEL", "WORKLOAD_KINDS", "Workload", "build_objects",
    "describe", "event_key_secret_name", "owned_by", "redacted", "with_event_key",
]

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"  # --workload-priority: a WorkloadPriorityClass
#: JobSet failure-policy rule (JobSet >= 0.6): a child Job that ran past activeDeadlineSeconds fails the JobSet with
#: reason FailJobSetFailurePolicyAction, which :mod:`.podstate` reads as "exceeded --timeout".
JOBSET_DEADLINE_RULE: Mapping[str, Any] = {
    "name": "nbtrainTimeout", "action": "FailJobSet", "onJobFailureReasons": ["DeadlineExceeded"]}


@dataclass(frozen=True)
class Workload:
    """API coordinates of a flavor's top-level object."""

    api_version: str
    kind: str
    plural: str
    group: str
    crd: str | None  # the CRD to install when the cluster lacks it
    install: str | None = None


WORKLOAD_KINDS: Mapping[str, Workload] = {
    "job": Workload("batch/v1", "Job", "jobs", "batch", None),
    "pytorchjob": Workload(
        "kubeflow.org/v1", "PyTorchJob", "pytorchjobs", "kubeflow.org", "pytorchjobs.kubeflow.org",
        "the Kubeflow Training Operator v1 (https://github.com/kubeflow/training-operator)",
    ),
    "jobset": Workload(
        "jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets", "jobset.x-k8s.io", "jobsets.jobset.x-k8s.io",
        "JobSet (https://jobset.sigs.k8s.io/docs/installation/)",
    ),
    "trainjob": Workload(
        "trainer.kubeflow.org/v1alpha1", "TrainJob", "trainjobs", "trainer.kubeflow.org", "trainjobs.trainer.kubeflow.org",
        "Kubeflow Trainer v2 and a torch runtime (https://www.kubeflow.org/docs/components/trainer/operator-guides/"
        "installation/)",
    ),
}


def labels_for(run_id: str, attempt: int) -> dict[str, str]:
    """Labels on every object and pod of one attempt (select pods with both nbtrain keys)."""
    return {
        nm.LABEL_MANAGED_BY: "nbtrain",
        nm.LABEL_RUN_ID: nm.dns_label(run_id),
        nm.LABEL_ATTEMPT: str(attempt),
    }


def event_key_secret_name(base: str) -> str:
    """The name of the Secret that holds the event key of the attempt whose workload is ``base``."""
    return nm.dns_label(f"{base}-event-key")


def with_event_key(secret: Mapping[str, Any], key: bytes) -> dict[str, Any]:
    """A copy of the event-key Secret ``secret`` with ``key`` in its data (only ever sent to the API)."""
    text = encode_event_key(key).encode("ascii")
    return {**secret, "data": {EVENT_KEY_FIELD: base64.b64encode(text).decode("ascii")}}


def redacted(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` as it may be written or printed: a Secret without its data."""
    out = dict(obj)
    if out.get("kind") == "Secret":
        out.pop("data", None)
        out.pop("stringData", None)
    return out


def _metadata(name: str, namespace: str, labels: Mapping[str, str], annotations: Mapping[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": dict(labels), "annotations": dict(annotations)}


def _job_spec(spec: JobSpec, template: dict[str, Any], *, ttl_s: int | None, suspend: bool) -> dict[str, Any]:
    job: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": spec.nodes,
        "parallelism": spec.nodes,
        "backoffLimit": 0,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": {"rules": [
            {"action": "FailJob", "onExitCodes": {
                "containerName": container_name("job"), "operator": "NotIn", "values": [0]}},
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        ]},
        "template": template,
    }
    if ttl_s is not None:
        job["ttlSecondsAfterFinished"] = ttl_s
    if spec.timeout_s is not None:
        job["activeDeadlineSeconds"] = math.ceil(spec.timeout_s)
    if suspend:
        job["suspend"] = True
    return job


@dataclass(frozen=True)
class _Meta:
    """What every object of an attempt is labelled and annotated with (the workload also with Kueue's labels)."""

    namespace: str
    labels: dict[str, str]
    annotations: dict[str, str]
    workload_labels: dict[str, str]
    suspend: bool  # Kueue admits a suspended workload all-or-nothing by unsuspending it

    def of(self, name: str, *, workload: bool = False) -> dict[str, Any]:
        return _metadata(name, self.namespace, self.workload_labels if workload else self.labels, self.annotations)


def build_objects(
    spec: JobSpec, *, names: nm.ObjectNames, namespace: str, inputs: PodInputs, bundle_digest: str,
) -> list[dict[str, Any]]:
    """The API objects of one attempt, in creation order (workload first; a Job's headless Service last)."""
    labels = {**spec.labels, **inputs.labels}  # --label (never one of nbtrain's keys: validate.check_knobs)
    workload_labels = dict(labels)
    if spec.queue:
        workload_labels[KUEUE_QUEUE_LABEL] = spec.queue
    if spec.workload_priority:  # Kueue's WorkloadPriorityClass (the table refuses it without --queue)
        workload_labels[KUEUE_PRIORITY_LABEL] = spec.workload_priority
    meta = _Meta(namespace, labels, {**spec.annotations, nm.ANNOTATION_RUN_ID: inputs.run_id,
                                     nm.ANNOTATION_DIGEST: bundle_digest}, workload_labels, bool(spec.queue))
    owned = [_secret(inputs, meta), _configmap(names, inputs, meta)]
    if spec.flavor == "pytorchjob":
        return [_pytorchjob(spec, names, inputs, meta), *owned]
    if spec.flavor == "trainjob":  # Trainer v2 makes the JobSet from its runtime: see .trainjob
        workload = tj.train_job(spec, pod_template(spec, inputs, subdomain=None), metadata=meta.of(names.base,
                                workload=True), runtime=tj.runtime_ref(inputs.options.trainjob_runtime),
                                container_name=container_name("trainjob"), labels=labels,
                                annotations=meta.annotations, suspend=meta.suspend)
        return [workload, *owned]
    if spec.flavor == "jobset":
        return [_jobset(spec, names, inputs, meta), *owned]
    workload = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta.of(names.base, workload=True),
        "spec": _job_spec(spec, pod_template(spec, inputs, subdomain=names.service), ttl_s=inputs.options.ttl_s,
                          suspend=meta.suspend),
    }
    return [workload, *owned, _service(names, inputs, meta)]


def _configmap(names: nm.ObjectNames, inputs: PodInputs, meta: _Meta) -> dict[str, Any]:
    """The immutable ConfigMap of the payload (bundle and nbtrain runtime, or the runtime and the parts' listing)."""
    configmap: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta.of(names.configmap),
                                 "immutable": True}
    if inputs.payload.data:
        configmap["data"] = dict(inputs.payload.data)
    if inputs.payload.binary_data:
        configmap["binaryData"] = dict(inputs.payload.binary_data)
    return configmap


def _secret(inputs: PodInputs, meta: _Meta) -> dict[str, Any]:
    """The event-key Secret, without data: see the module docstring."""
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta.of(inputs.event_key_secret), "type": "Opaque",
            "immutable": True}


def _pytorchjob(spec: JobSpec, names: nm.ObjectNames, inputs: PodInputs, meta: _Meta) -> dict[str, Any]:
    """The PyTorchJob of a ``--flavor pytorchjob`` gang (one Master, ``nodes - 1`` Workers)."""
    template = pod_template(spec, inputs, subdomain=None)
    replicas: dict[str, Any] = {"Master": {"replicas": 1, "restartPolicy": "Never", "template": template}}
    if spec.nodes > 1:
        replicas["Worker"] = {"replicas": spec.nodes - 1, "restartPolicy": "Never", "template": template}
    # cleanPodPolicy Running: once the PyTorchJob has ended, the operator deletes the pods still running or pending
    # (the rest of a failed gang, which would otherwise hold its GPUs) and keeps the finished ones, whose logs
    # say why, until the TTL (None kept every pod; All deletes the finished ones too)
    run_policy: dict[str, Any] = {"backoffLimit": 0, "cleanPodPolicy": "Running",
                                  "ttlSecondsAfterFinished": inputs.options.ttl_s}
    if spec.timeout_s is not None:
        run_policy["activeDeadlineSeconds"] = math.ceil(spec.timeout_s)
    if meta.suspend:
        run_policy["suspend"] = True
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": meta.of(names.base, workload=True),
        "spec": {"nprocPerNode": str(spec.procs), "runPolicy": run_policy, "pytorchReplicaSpecs": replicas},
    }


def _jobset(spec: JobSpec, names: nm.ObjectNames, inputs: PodInputs, meta: _Meta) -> dict[str, Any]:
    """The JobSet of a ``--flavor jobset`` gang (one replicated Indexed Job)."""
    template = pod_template(spec, inputs, subdomain=None)  # JobSet sets the subdomain itself
    job = _job_spec(spec, template, ttl_s=None, suspend=False)
    jobset_spec: dict[str, Any] = {
        "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
        # the rule makes a Job past its deadline fail the JobSet with a reason of its own (podstate reads it as
        # "exceeded --timeout"); any other failure fails it as before (no rule: ReachedMaxRestarts)
        "failurePolicy": {"maxRestarts": 0, "rules": [copy.deepcopy(dict(JOBSET_DEADLINE_RULE))]},
        "successPolicy": {"operator": "All"},
        "ttlSecondsAfterFinished": inputs.options.ttl_s,
        "replicatedJobs": [{
            "name": nm.JOBSET_REPLICATED_JOB,
            "replicas": 1,
            "template": {"metadata": {"labels": dict(meta.labels)}, "spec": job},
        }],
    }
    if meta.suspend:
        jobset_spec["suspend"] = True
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta.of(names.base, workload=True),
            "spec": jobset_spec}


def _service(names: nm.ObjectNames, inputs: PodInputs, meta: _Meta) -> dict[str, Any]:
    """The headless Service that gives an Indexed Job's pods their DNS names."""
    port = inputs.options.port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta.of(names.service),
        "spec": {
            "clusterIP": "None",  # headless: <job>-<index>.<service> resolves to each pod
            "publishNotReadyAddresses": True,  # rank 0 must resolve before any pod is Ready
            "selector": {nm.LABEL_RUN_ID: meta.labels[nm.LABEL_RUN_ID],
                         nm.LABEL_ATTEMPT: meta.labels[nm.LABEL_ATTEMPT]},
            "ports": [{"name": "rendezvous", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }


def owned_by(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``obj`` whose ownerReferences point at ``owner`` (as returned by the API: needs its uid)."""
    out = {**obj, "metadata": dict(obj["metadata"])}
    out["metadata"]["ownerReferences"] = [{
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": False,
    }]
    return out


class _Shown(str):
    """A ConfigMap value ``--dry-run`` prints in full, as a YAML literal block."""


class _DescribeDumper(yaml.SafeDumper):
    pass


_DescribeDumper.add_representer(
    _Shown, lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", str(text), style="|"))


def _shown_in_full(key: str) -> bool:
    """The generated Accelerate config (``r000-accelerate.yaml``): small, no secrets, and what decides the launch."""
    return key.startswith("r") and key.split("-", 1)[-1] == CONFIG_NAME


def _abridged(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A ConfigMap with its file contents replaced by their sizes (for printing), except the Accelerate config's text."""
    out = dict(obj)
    for field in ("data", "binaryData"):
        if field in out:
            out[field] = {k: _Shown(v) if field == "data" and _shown_in_full(k) else
                          f"<{len(v)} {'base64 ' if field == 'binaryData' else ''}characters>"
                          for k, v in out[field].items()}
    return out


def describe(objects: list[dict[str, Any]]) -> str:
    """The YAML of ``objects`` as ``--dry-run`` prints it (ConfigMap file contents abridged but the generated
    Accelerate config shown in full, no Secret data)."""
    docs = []
    for obj in objects:
        shown = _abridged(obj) if obj.get("kind") == "ConfigMap" else redacted(obj)
        head = ""
        if obj is not objects[0]:
            head = (f"# ownerReferences -> {objects[0]['kind']} {objects[0]['metadata']['name']} "
                    "(added at submit, from its uid)\n")
        if obj.get("kind") == "Secret":
            head += (f"# data.{EVENT_KEY_FIELD}: a fresh random event key, made at submit and sent only to the API "
                     "(the pods tag their event lines with it)\n")
        docs.append(head + yaml.dump(shown, Dumper=_DescribeDumper, sort_keys=False, default_flow_style=False,
                                     width=120))
    return "---\n" + "---\n".join(docs)
