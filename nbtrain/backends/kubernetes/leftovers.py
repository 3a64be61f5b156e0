"""A workload that outlives its run's verdict: what ``cancel`` deletes once the run is terminal.

The mirror deletes a failed or cancelled gang itself, but that delete can fail (a 403, the network) and a run
nobody followed has no mirror at all; the pods then keep their GPUs. ``cancel`` on a terminal run therefore looks
at the attempt's workload and deletes it when :func:`leftover_reason` says so. A finished success is left alone:
its Job and pods stay until their TTL, for ``kubectl logs``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbtrain.errors import BackendError
from nbtrain.events import EventKind, EventWriter
from nbtrain.model import RunState

if TYPE_CHECKING:
    from nbtrain.backends.kubernetes.api import KubeApi
    from nbtrain.backends.kubernetes.target import Target

# pod phases that hold (or are waiting for) a node's resources
LIVE_PHASES = frozenset({"Pending", "Running"})


def live_pods(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """Names of the pods that are Pending or Running, in order."""
    return [str((p.get("metadata") or {}).get("name")) for p in pods
            if (p.get("status") or {}).get("phase", "Pending") in LIVE_PHASES]


def leftover_reason(state: RunState, workload_exists: bool, live: Sequence[str]) -> str | None:
    """Why a terminal run's workload must be deleted, or None to leave it (it is gone, or a success whose pods all
    finished)."""
    if not workload_exists:
        return None
    if live:
        return f"{len(live)} of its pods still run or wait ({', '.join(live)})"
    if state in (RunState.FAILED, RunState.CANCELLED):
        return f"the run is {state.value} and the workload was still there"
    return None


def delete_leftover(api: KubeApi, target: Target, state: RunState, events_dir: Path, *,
                    timeout_s: float) -> str | None:
    """Delete ``target``'s workload when :func:`leftover_reason` says so (foreground; already gone is fine), wait up
    to ``timeout_s`` for its pods to go, and record a NOTICE naming what was deleted. Returns that message, or None
    when nothing was deleted. BackendError when pods remain after ``timeout_s``; API errors as raised."""
    workload = api.get(target.kind, target.name, target.namespace)
    pods, _ = api.list_items("Pod", target.namespace, label_selector=target.selector)
    live = live_pods(pods)
    why = leftover_reason(state, workload is not None, live)
    if why is None:
        return None
    api.delete(target.kind, target.name, target.namespace, propagation="Foreground")
    message = (f"cancel after the verdict: deleted the {target.kind} {target.name} in namespace {target.namespace} "
               f"({why}); its pods, ConfigMap and Service go with it")
    EventWriter(events_dir / "cancel.jsonl", "kubernetes-cancel", attempt=target.attempt).emit(
        EventKind.NOTICE, message=message)
    deadline = time.monotonic() + timeout_s
    while True:
        pods, _ = api.list_items("Pod", target.namespace, label_selector=target.selector)
        if not pods:
            return message
        if time.monotonic() >= deadline:
            raise BackendError(
                f"cancel of run {target.run_id}: {target.kind} {target.name} was deleted but {len(pods)} pod(s) "
                f"still exist after {timeout_s:.0f} s in namespace {target.namespace}; check them with "
                f"kubectl get pods -n {target.namespace} -l {target.selector}")
        time.sleep(0.2)
