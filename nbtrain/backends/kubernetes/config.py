"""Defaults of the Kubernetes backend that the JobSpec does not carry, read from ``NBTRAIN_K8S_*``.

A JobSpec field (``--image``, ``--namespace``...) always wins over these. Documented in docs/kubernetes.md:

==========================  ============================================================================
NBTRAIN_K8S_IMAGE           image when ``--image`` is not given (Python + torch + accelerate; no nbtrain)
NBTRAIN_K8S_NAMESPACE       namespace when ``--namespace`` is not given (else the kubeconfig context's)
NBTRAIN_K8S_CONTEXT         kubeconfig context (else the current one; ``KUBECONFIG`` picks the file)
NBTRAIN_K8S_DEVICE          what ``--device auto`` means on the cluster: ``gpu`` (default: GPUs when
                            ``--gpus`` > 0) or ``cpu`` (CPU-only clusters: ``--gpus`` = processes per pod)
NBTRAIN_K8S_PYTHON          the image's Python interpreter (default ``python``)
NBTRAIN_K8S_PORT            rendezvous port on rank 0's pod (default 29500)
NBTRAIN_K8S_TTL             seconds a finished Job (and its pods' logs) is kept (default 604800: 7 days)
NBTRAIN_K8S_RUN_AS_USER     uid (and gid) of the pods' processes (default 1000; non-root is required)
NBTRAIN_K8S_LOG_STREAMS     most pod logs followed at once (default 8; rank 0 and failing pods first)
==========================  ============================================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from nbtrain.errors import SpecError

__all__ = ["KubeOptions"]


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
    run_as_user: int = 1000
    log_streams: int = 8
    kubeconfig: str | None = None

    def __post_init__(self) -> None:
        if self.device not in ("gpu", "cpu"):
            raise SpecError(f"NBTRAIN_K8S_DEVICE={self.device!r}: choose gpu or cpu.")
        if self.run_as_user <= 0:
            raise SpecError(f"NBTRAIN_K8S_RUN_AS_USER={self.run_as_user}: pods must run as a non-root uid (> 0).")

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
            run_as_user=_int(env, "NBTRAIN_K8S_RUN_AS_USER", 1000, 1, 2**31 - 1),
            log_streams=_int(env, "NBTRAIN_K8S_LOG_STREAMS", 8, 1, 256),
            kubeconfig=env.get("KUBECONFIG") or None,
        )
