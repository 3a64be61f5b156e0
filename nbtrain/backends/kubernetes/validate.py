"""Refuse, before anything is created, what the API server would refuse (pure).

Each message names the flag, the value and the rule, so a typo is fixed in the cell and not found
later in a 422 from the cluster.
"""

from __future__ import annotations

import posixpath
import re

from nbtrain.backends.kubernetes import names as nm
from nbtrain.backends.kubernetes.payload import MOUNT_PATH
from nbtrain.bundle.secrets import looks_like_secret_name
from nbtrain.errors import SpecError
from nbtrain.secrets import redact_url
from nbtrain.spec import JobSpec, split_volume

__all__ = ["RESERVED_MOUNTS", "check_knobs", "check_placement", "check_spec", "check_volumes", "is_extended_resource",
           "is_quantity", "label_key_ok", "label_value_ok"]

#: Paths of the pod nbtrain mounts itself (the bundle and runtime, /dev/shm, the writable /tmp): no --volume on,
#: under or above them.
RESERVED_MOUNTS = (MOUNT_PATH, "/dev/shm", "/tmp")
_OWN_LABELS = frozenset({nm.LABEL_MANAGED_BY, nm.LABEL_RUN_ID, nm.LABEL_ATTEMPT})
_OWN_ANNOTATIONS = frozenset({nm.ANNOTATION_RUN_ID, nm.ANNOTATION_DIGEST})

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_QUANTITY = re.compile(r"^[+]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?[0-9]+))?$")


def is_quantity(text: str) -> bool:
    """True for Kubernetes resource quantities such as ``8``, ``500m``, ``64Gi``, ``1.5``."""
    return bool(_QUANTITY.match(text))


def _label_key_ok(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_QUALIFIED_NAME.match(name))


def label_key_ok(key: str) -> bool:
    """True for a valid label or annotation key (an optional DNS-subdomain prefix and '/', then a qualified name)."""
    return _label_key_ok(key)


def label_value_ok(value: str) -> bool:
    """True for a valid label value (at most 63 characters: letters, digits, '-', '_', '.', alphanumeric ends)."""
    return len(value) <= 63 and bool(_LABEL_VALUE.match(value))


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def check_volumes(spec: JobSpec) -> None:
    """SpecError for the first ``--volume`` the cluster would refuse or nbtrain cannot use, and for a
    ``--checkpoint-dir`` that is not on a volume (each pod would then keep its own checkpoints, lost with it)."""
    seen: dict[str, str] = {}
    for volume in spec.volumes:
        claim, path = split_volume(volume)
        if len(claim) > 253 or not _DNS_SUBDOMAIN.match(claim):
            raise SpecError(f"--volume {volume}: {claim!r} is not a PersistentVolumeClaim name (lower-case letters, "
                            "digits, '-' and '.', at most 253 characters); use the name kubectl get pvc shows.")
        if posixpath.normpath(path) != path or path == "/":
            raise SpecError(f"--volume {volume}: the mount path {path!r} must be an absolute path without '..', '.', "
                            f"'//' or a trailing '/', and not '/'; e.g. {posixpath.normpath(path) if path != '/' else '/data'}.")
        for reserved in RESERVED_MOUNTS:
            if _within(path, reserved) or _within(reserved, path):
                raise SpecError(f"--volume {volume}: nbtrain mounts {reserved} in every pod itself, so a volume cannot "
                                f"be mounted at {path}; choose another path, e.g. --volume {claim}:/data.")
        if path in seen:
            raise SpecError(f"--volume {volume}: {path} is already the mount path of --volume {seen[path]}; give "
                            "each volume its own path.")
        seen[path] = volume
    if spec.checkpoint_dir is not None and spec.volumes:
        directory = spec.checkpoint_dir
        if "://" in directory:
            raise SpecError(f"--checkpoint-dir {redact_url(directory)}: checkpoints on object storage or other URLs are "
                            "not supported on Kubernetes yet (local and Slurm runs take them); use a directory under a "
                            f"--volume mount path ({', '.join(seen)}), e.g. --checkpoint-dir {next(iter(seen))}/checkpoints.")
        if not directory.startswith("/") or posixpath.normpath(directory) != directory:
            raise SpecError(f"--checkpoint-dir {directory!r}: on Kubernetes it is a path inside the pods, absolute and "
                            f"without '..', under a --volume mount path ({', '.join(seen)}), e.g. "
                            f"--checkpoint-dir {next(iter(seen))}/checkpoints.")
        if not any(_within(directory, mount) for mount in seen):
            raise SpecError(f"--checkpoint-dir {directory}: not under a --volume mount path ({', '.join(seen)}): each "
                            "pod would keep its own checkpoints and lose them with the pod. Use a directory under one, "
                            f"e.g. --checkpoint-dir {next(iter(seen))}/checkpoints, or mount a volume that holds it.")


def check_knobs(spec: JobSpec) -> None:
    """SpecError for the first ``--image-pull-secret``, ``--priority-class``, ``--shm-size``, ``--label`` or
    ``--annotation`` the API server would refuse, or a label/annotation key that nbtrain sets itself."""
    for secret in spec.image_pull_secrets:
        if len(secret) > 253 or not _DNS_SUBDOMAIN.match(secret):
            raise SpecError(f"--image-pull-secret {secret!r}: not a Secret name (lower-case letters, digits, '-' and "
                            "'.', at most 253 characters); use the name kubectl get secrets shows.")
    if spec.priority_class is not None and (len(spec.priority_class) > 253
                                            or not _DNS_SUBDOMAIN.match(spec.priority_class)):
        raise SpecError(f"--priority-class {spec.priority_class!r}: not a PriorityClass name (lower-case letters, "
                        "digits, '-' and '.'); kubectl get priorityclasses lists them.")
    if spec.shm_size is not None and not is_quantity(spec.shm_size):
        raise SpecError(f"--shm-size {spec.shm_size!r}: not a Kubernetes quantity; write e.g. --shm-size 16Gi.")
    for flag, pairs, own in (("--label", spec.labels, _OWN_LABELS), ("--annotation", spec.annotations,
                                                                        _OWN_ANNOTATIONS)):
        for key, value in pairs.items():
            if not _label_key_ok(key):
                raise SpecError(f"{flag} {key}={value}: {key!r} is not a valid key (an optional DNS prefix and '/', "
                                "then at most 63 letters, digits, '-', '_' or '.'), e.g. example.com/team.")
            if key in own or key.startswith(("nbtrain.dev/", "kueue.x-k8s.io/")):
                raise SpecError(f"{flag} {key}={value}: nbtrain (or Kueue, through --queue) sets {key} itself; use "
                                "another key.")
            if flag == "--label" and (len(value) > 63 or not _LABEL_VALUE.match(value)):
                raise SpecError(f"--label {key}={value}: a label value is at most 63 letters, digits, '-', '_' or "
                                "'.', beginning and ending with a letter or digit.")
    check_placement(spec)


def is_extended_resource(name: str) -> bool:
    """True for a name Kubernetes accepts as an extended resource (``amd.com/gpu``): a domain prefix outside
    ``kubernetes.io`` and a name that, as ``requests.NAME``, is a valid qualified name (the API's own rule)."""
    prefix, slash, short = name.partition("/")
    if not slash or prefix.endswith("kubernetes.io") or "/" in short:  # kubernetes.io/: native resources
        return False
    if len(f"requests.{prefix}") > 253 or not _DNS_SUBDOMAIN.match(prefix):
        return False
    return 0 < len(short) <= 63 and bool(_QUALIFIED_NAME.match(short))


def check_placement(spec: JobSpec) -> None:
    """SpecError for a ``--gpu-resource``, ``--workload-priority``, ``--spread-by`` or ``--pod-template`` value the
    API server (or Kueue) would refuse, naming the value and the fix."""
    if not is_extended_resource(spec.gpu_resource):
        raise SpecError(f"--gpu-resource {spec.gpu_resource!r}: not an extended resource name (a vendor domain, '/', "
                        "then a name: e.g. nvidia.com/gpu, amd.com/gpu, gpu.intel.com/i915); use the name the nodes' "
                        "device plugin advertises (kubectl describe node, under Allocatable).")
    priority = spec.workload_priority
    if priority is not None and (len(priority) > 63 or not _DNS_SUBDOMAIN.match(priority)):
        raise SpecError(f"--workload-priority {priority!r}: not a WorkloadPriorityClass name (lower-case letters, "
                        "digits, '-' and '.', at most 63 characters: it becomes a label value); kubectl get "
                        "workloadpriorityclasses lists them.")
    if spec.spread_by is not None and not _label_key_ok(spec.spread_by):
        raise SpecError(f"--spread-by {spec.spread_by!r}: not a node label key; use e.g. --spread-by "
                        "kubernetes.io/hostname (a node per pod) or --spread-by topology.kubernetes.io/zone.")
    if spec.pod_template is not None and not spec.pod_template.strip():
        raise SpecError("--pod-template: the path is empty; give a YAML file with a PodTemplateSpec fragment "
                        "(metadata, spec), or drop the option.")


def check_spec(spec: JobSpec, *, image: str, namespace: str) -> None:
    """SpecError for the first value of ``spec`` the API server would reject."""
    if not image.strip() or any(c.isspace() for c in image):
        raise SpecError(f"--image {image!r}: an image reference has no spaces, e.g. ghcr.io/org/train:1.0.")
    if len(namespace) > 63 or not _DNS_LABEL.match(namespace):
        raise SpecError(f"--namespace {namespace!r}: must be a DNS label (lower-case letters, digits, '-', "
                        "at most 63 characters).")
    if spec.service_account and (len(spec.service_account) > 253 or not _DNS_SUBDOMAIN.match(spec.service_account)):
        raise SpecError(f"--service-account {spec.service_account!r}: not a valid service account name.")
    if spec.queue and (len(spec.queue) > 63 or not _LABEL_VALUE.match(spec.queue)):
        raise SpecError(f"--queue {spec.queue!r}: a Kueue LocalQueue name (at most 63 letters, digits, '-', '_', '.').")
    for flag, value in (("--cpu", spec.cpu), ("--memory", spec.memory)):
        if value is not None and not is_quantity(str(value)):
            raise SpecError(f"{flag} {value!r}: not a Kubernetes quantity; write e.g. --cpu 8, --cpu 500m, --memory 64Gi.")
    for key, value in spec.node_selector.items():
        if not _label_key_ok(key) or len(value) > 63 or not _LABEL_VALUE.match(value):
            raise SpecError(f"--node-selector {key}={value}: not a valid label selector "
                            "(e.g. --node-selector nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3).")
    for toleration in spec.tolerations:
        key = toleration.get("key", "")
        if key and not _label_key_ok(key):
            raise SpecError(f"--toleration {key!r}: not a valid taint key.")
    for name, ref in spec.secret_env.items():
        secret, _, key = ref.partition("/")
        if len(secret) > 253 or not _DNS_SUBDOMAIN.match(secret) or not _SECRET_KEY.match(key):
            raise SpecError(f"--secret-env {name}={ref}: {secret!r} must be a Secret's name and {key!r} one of its keys.")
    check_volumes(spec)
    check_knobs(spec)
    if not spec.allow_secrets:
        for name in spec.env:
            if looks_like_secret_name(name):
                raise SpecError(
                    f"--env {name}=...: this looks like a secret and would be written in plain text into the Job "
                    f"manifest. Put it in a Kubernetes Secret and pass --secret-env {name}=SECRET/KEY instead "
                    "(or --allow-secrets if it is not secret)."
                )
