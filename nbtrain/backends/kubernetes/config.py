"""Defaults of the Kubernetes backend that the JobSpec does not carry, read from ``NBTRAIN_K8S_*``.

A JobSpec field (``--image``, ``--namespace``...) always wins over these. Documented in docs/kubernetes.md:

============================  ============================================================================
NBTRAIN_K8S_IMAGE             image when ``--image`` is not given (Python + torch + accelerate; no nbtrain)
NBTRAIN_K8S_NAMESPACE         namespace when ``--namespace`` is not given (else the kubeconfig context's)
NBTRAIN_K8S_CONTEXT           kubeconfig context (else the current one; ``KUBECONFIG`` picks the file)
NBTRAIN_K8S_DEVICE            what ``--device auto`` means on the cluster: ``gpu`` (default: GPUs when
                              ``--gpus`` > 0) or ``cpu`` (CPU-only clusters: ``--gpus`` = processes per pod)
NBTRAIN_K8S_PYTHON            the image's Python interpreter (default ``python``)
NBTRAIN_K8S_PORT              rendezvous port on rank 0's pod (default 29500)
NBTRAIN_K8S_TTL               seconds a finished Job (and its pods' logs) is kept (default 604800: 7 days)
NBTRAIN_K8S_RUN_AS_USER       uid (and gid, fsGroup) of the pods' processes (default 1000; non-root is required), or
                              ``auto``: no ids in the manifests, the platform assigns them (OpenShift's
                              ``restricted-v2`` SCC refuses pods that ask for ids outside the namespace's range)
NBTRAIN_K8S_LOG_STREAMS       most pod logs followed at once (default 8; rank 0 and failing pods first)
NBTRAIN_K8S_TRAINJOB_RUNTIME  the Kubeflow Trainer v2 runtime ``--flavor trainjob`` runs on: ``NAME`` (a
                              ClusterTrainingRuntime; default ``torch-distributed``, Trainer's torch runtime) or
                              ``TrainingRuntime/NAME`` (one in the run's namespace)
============================  ============================================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from nbtrain.errors import SpecError

__all__ = ["RUN_AS_AUTO", "KubeOptions"]

RUN_AS_AUTO = "auto"  # NBTRAIN_K8S_RUN_AS_USER=auto: KubeOptions.run_as_user is None
_MAX_ID = 2**31 - 1


def _int(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SpecError(f"{name}={raw!r}: expected a whole number from {low} to {high}.") from None
    if not low <= value <= high:
        raise SpecError(f"{name}={raw!r}: out of range; use a value from {low} to {high}.")
    return value


def _run_as_user(env: Mapping[str, str]) -> int | None:
    """``NBTRAIN_K8S_RUN_AS_USER``: a uid > 0, ``auto`` (None: the platform picks the ids), or unset (1000)."""
    name = "NBTRAIN_K8S_RUN_AS_USER"
    raw = (env.get(name) or "").strip()
    if not raw:
        return 1000
    if raw.lower() == RUN_AS_AUTO:
        return None
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= _MAX_ID:
        raise SpecError(f"{name}={raw!r}: expected a non-root uid (a whole number from 1 to {_MAX_ID}) or "
                        f"{RUN_AS_AUTO} (OpenShift: the platform assigns the ids); set {name}=1000, another uid the "
                        f"image can run as, or {name}={RUN_AS_AUTO}.")
    return int(raw)


@dataclass(frozen=True)
class KubeOptions:
    """Cluster-side defaults (see the module docstring for the environment variables)."""

    image: str | None = None
    namespace: str | None = None
    context: str | None = None
    device: str = "gpu"
    python: str = "python"
    port: int = 29500
    ttl_s: int = 7 * 24 * 3600
    run_as_user: int | None = 1000  # None: NBTRAIN_K8S_RUN_AS_USER=auto, the pods carry no ids (runAsNonRoot stays)
    log_streams: int = 8
    kubeconfig: str | None = None
    trainjob_runtime: str = "torch-distributed"  # checked where it is used (.trainjob.runtime_ref)

    def __post_init__(self) -> None:
        if self.device not in ("gpu", "cpu"):
            raise SpecError(f"NBTRAIN_K8S_DEVICE={self.device!r}: choose gpu or cpu.")
        if self.run_as_user is not None and self.run_as_user <= 0:
            raise SpecError(f"NBTRAIN_K8S_RUN_AS_USER={self.run_as_user}: pods must run as a non-root uid (> 0); "
                            f"use 1000 or {RUN_AS_AUTO}.")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> KubeOptions:
        """Options from ``NBTRAIN_K8S_*`` (``env`` defaults to ``os.environ``)."""
        env = os.environ if env is None else env
        return cls(
            image=env.get("NBTRAIN_K8S_IMAGE") or None,
            namespace=env.get("NBTRAIN_K8S_NAMESPACE") or None,
            context=env.get("NBTRAIN_K8S_CONTEXT") or None,
            device=(env.get("NBTRAIN_K8S_DEVICE") or "gpu").strip().lower(),
            python=env.get("NBTRAIN_K8S_PYTHON") or "python",
            port=_int(env, "NBTRAIN_K8S_PORT", 29500, 1, 65535),
            ttl_s=_int(env, "NBTRAIN_K8S_TTL", 7 * 24 * 3600, 0, 30 * 24 * 3600),
            run_as_user=_run_as_user(env),
            log_streams=_int(env, "NBTRAIN_K8S_LOG_STREAMS", 8, 1, 256),
            kubeconfig=env.get("KUBECONFIG") or None,
            trainjob_runtime=(env.get("NBTRAIN_K8S_TRAINJOB_RUNTIME") or "torch-distributed").strip(),
        )
