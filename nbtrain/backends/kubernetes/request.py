"""The Kubernetes backend's own request: what ``plan`` decided and ``submit`` does (pure, frozen).

A :class:`KubernetesRequest` is the ``request`` of a Kubernetes :class:`~nbtrain.backends.base.Plan` (TorchX's
``AppDryRunInfo[KubernetesRequest]``): the manifests to apply in order (the workload first, then what it owns), where
(namespace, kubeconfig context, attempt directory) and the facts its handle keeps. Inside a process the object
travels as it is; :meth:`~KubernetesRequest.to_json` is its JSON form (lists for tuples), read back by
:meth:`~KubernetesRequest.from_json`. It never carries the attempt's event key (made at submit).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = ["HANDLE_FIELDS", "KubernetesRequest"]

#: What a Kubernetes RunHandle keeps of its request (with the workload's ``uid``), as ``handle.json`` and the run
#: record write it; :class:`~nbtrain.backends.kubernetes.target.Target` is the typed view read back from it.
HANDLE_FIELDS = ("attempt", "namespace", "context", "flavor", "kind", "name", "nodes", "procs", "world_size", "queue",
                 "timeout_s", "notices", "restart_budget", "ttl_s", "event_key_secret")


@dataclass(frozen=True)
class KubernetesRequest:
    """One attempt of a run as Kubernetes objects (see the module docstring).

    ``objects``: the manifests in the order ``submit`` applies them (``objects[0]`` is the workload, ``kind``
    ``name``; the rest get ownerReferences to it). ``restart_budget``: the last attempt automatic restarts may
    reach. ``ttl_s``: the workload's ttlSecondsAfterFinished (None for a TrainJob: its runtime's). ``describe``:
    what ``--dry-run`` prints after the generic lines.
    """

    run_id: str
    attempt: int
    namespace: str
    context: str | None
    flavor: str
    kind: str
    name: str
    nodes: int
    procs: int
    world_size: int
    queue: str | None
    timeout_s: float | None
    ttl_s: int | None
    restart_budget: int
    use_gpu: bool
    objects: tuple[dict[str, Any], ...]
    event_key_secret: str
    attempt_dir: str
    notices: tuple[str, ...]
    describe: str

    def handle_data(self, uid: str | None) -> dict[str, Any]:
        """The data of the RunHandle ``submit`` returns for this request (``uid``: the created workload's)."""
        data = {k: getattr(self, k) for k in HANDLE_FIELDS}
        return {**data, "notices": list(self.notices), "uid": uid}

    def to_json(self) -> dict[str, Any]:
        """This request as a JSON object (tuples as lists)."""
        data = asdict(self)
        data["objects"] = [dict(o) for o in self.objects]
        data["notices"] = list(self.notices)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KubernetesRequest:
        """The request :meth:`to_json` wrote (unknown keys are ignored)."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["objects"] = tuple(dict(o) for o in values.get("objects") or ())
        values["notices"] = tuple(values.get("notices") or ())
        return cls(**values)
