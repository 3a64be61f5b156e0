"""Which attempt on which cluster object a mirror follows (rebuilt from the RunHandle in any process)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nbtrain.backends.kubernetes import names as nm
from nbtrain.errors import BackendError

__all__ = ["Target", "target_of"]


@dataclass(frozen=True)
class Target:
    """Which attempt to follow (rebuilt from the RunHandle in any process)."""

    run_id: str
    attempt: int
    namespace: str
    flavor: str
    kind: str
    name: str
    nodes: int
    procs: int
    queue: str | None = None
    timeout_s: float | None = None
    notices: tuple[str, ...] = ()
    restart_budget: int = 0  # the last attempt an automatic restart may reach (--max-restarts)
    ttl_s: int | None = None  # the workload's ttlSecondsAfterFinished (None: unknown, or its runtime's)

    @property
    def selector(self) -> str:
        """Label selector of this attempt's pods."""
        return f"{nm.LABEL_RUN_ID}={nm.dns_label(self.run_id)},{nm.LABEL_ATTEMPT}={self.attempt}"

    @property
    def world(self) -> int:
        """Number of ranks."""
        return self.nodes * self.procs


def target_of(run_id: str, data: Mapping[str, Any], attempt: int | None = None) -> Target:
    """The typed view of a Kubernetes RunHandle's ``data`` (``attempt``: another attempt of the same run).

    Raises BackendError for a handle that was never submitted (no workload name)."""
    if "name" not in data:
        raise BackendError(f"run {run_id} has no Kubernetes handle (it was never submitted).")
    return Target(
        run_id=run_id, attempt=int(data.get("attempt", 0)) if attempt is None else attempt,
        namespace=str(data["namespace"]), flavor=str(data.get("flavor", "job")), kind=str(data.get("kind", "Job")),
        name=str(data["name"]), nodes=int(data.get("nodes", 1)), procs=int(data.get("procs", 1)),
        queue=data.get("queue"), timeout_s=data.get("timeout_s"), notices=tuple(data.get("notices") or ()),
        restart_budget=int(data.get("restart_budget") or 0),
        ttl_s=None if data.get("ttl_s") is None else int(data["ttl_s"]),
    )
