"""Which attempt on which cluster object a mirror follows (rebuilt from the RunHandle in any process)."""

from __future__ import annotations

from dataclasses import dataclass

from nbtrain.backends.kubernetes import names as nm

__all__ = ["Target"]


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
