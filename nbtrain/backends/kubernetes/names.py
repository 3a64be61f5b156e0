"""Object names and labels that Kubernetes accepts (pure).

Kubernetes turns object names into DNS names and label values, both limited to 63 characters
(RFC 1123 labels: ``[a-z0-9]([-a-z0-9]*[a-z0-9])?``; Service names must also start with a letter,
RFC 1035). The longest name a flavor derives is a pod hostname:

- Indexed Job:  ``<job>-<index>``                   (hostname of each pod; ``<job>-0.<service>`` is rank 0)
- JobSet:       ``<jobset>-<replicatedJob>-<jobIndex>-<podIndex>``
- TrainJob:     ``<trainjob>-node-0-<podIndex>`` (Trainer v2 makes a JobSet named after the TrainJob, whose replicated
                Job ``node`` runs the trainer; rank 0 is ``<trainjob>-node-0-0.<trainjob>``, Trainer's own
                ``PET_MASTER_ADDR``)
- PyTorchJob:   ``<name>-worker-<index>`` / ``<name>-master-0``

so the base name is shortened (with a stable hash suffix) until the longest hostname fits.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

__all__ = [
    "LABEL_ATTEMPT",
    "LABEL_MANAGED_BY",
    "LABEL_RUN_ID",
    "MAX_DNS_LABEL",
    "ObjectNames",
    "dns_label",
    "is_dns_label",
    "object_names",
]

MAX_DNS_LABEL = 63
LABEL_RUN_ID = "nbtrain.dev/run-id"
LABEL_ATTEMPT = "nbtrain.dev/attempt"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
ANNOTATION_RUN_ID = "nbtrain.dev/run-id"
ANNOTATION_DIGEST = "nbtrain.dev/bundle-digest"
JOBSET_REPLICATED_JOB = "node"  # nbtrain's JobSets, and Trainer v2's trainer Job (its constants.Node)

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def is_dns_label(text: str) -> bool:
    """True when ``text`` is a valid RFC 1123 label (what pod hostnames and label values need)."""
    return len(text) <= MAX_DNS_LABEL and bool(_DNS_LABEL.match(text))


def dns_label(text: str, max_len: int = MAX_DNS_LABEL) -> str:
    """``text`` as an RFC 1035 label of at most ``max_len`` characters (starts with a letter).

    Shortened names end with 6 hex digits of the original's sha1, so different long names stay
    different and the same name always maps to the same label.
    """
    slug = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    slug = re.sub(r"-{2,}", "-", slug) or "run"
    if not slug[0].isalpha():
        slug = "nbt-" + slug
    if len(slug) <= max_len:
        return slug
    digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:6]
    head = slug[: max(1, max_len - 7)].rstrip("-")
    return f"{head}-{digest}"


@dataclass(frozen=True)
class ObjectNames:
    """Names of everything one attempt creates, and the rendezvous address of rank 0's pod."""

    base: str  # the Job / PyTorchJob / JobSet / TrainJob
    service: str  # headless Service (Job flavor; operators make their own)
    configmap: str
    main_address: str  # DNS name of node 0's pod, or an env reference the operator fills
    hostnames: tuple[str, ...]  # every pod's hostname, node order

    @property
    def all(self) -> tuple[str, ...]:
        """Every name that must be a valid DNS label."""
        return (self.base, self.service, self.configmap, *self.hostnames)


def _hostnames(flavor: str, base: str, nodes: int) -> tuple[str, ...]:
    if flavor in ("jobset", "trainjob"):
        return tuple(f"{base}-{JOBSET_REPLICATED_JOB}-0-{i}" for i in range(nodes))
    if flavor == "pytorchjob":
        return (f"{base}-master-0", *(f"{base}-worker-{i}" for i in range(nodes - 1)))
    return tuple(f"{base}-{i}" for i in range(nodes))


def object_names(run_id: str, *, flavor: str, nodes: int, attempt: int = 0) -> ObjectNames:
    """Names for attempt ``attempt`` of ``run_id`` such that every derived hostname fits 63 chars."""
    wanted = run_id if attempt == 0 else f"{run_id}-a{attempt}"
    longest_suffix = max(len(h) for h in _hostnames(flavor, "", nodes))
    base = dns_label(wanted, MAX_DNS_LABEL - longest_suffix)
    hosts = _hostnames(flavor, base, nodes)
    if flavor in ("jobset", "trainjob"):  # JobSet's headless Service is named after the JobSet (= the TrainJob)
        main = f"{hosts[0]}.{base}"
    elif flavor == "pytorchjob":
        main = "$(MASTER_ADDR)"  # set by the training operator to the master's service
    else:
        main = f"{hosts[0]}.{base}"
    return ObjectNames(base=base, service=base, configmap=dns_label(f"{base}-bundle"), main_address=main,
                       hostnames=hosts)
