"""Run summaries for the REST API and the runs panel (wire models, separate from persistence)."""

from __future__ import annotations

import threading
import time
from typing import Any

from nbtrain.client import Run
from nbtrain.store import Store

__all__ = ["RunCache", "run_detail", "run_summary"]


def run_summary(run: Run) -> dict[str, Any]:
    """One row of the runs list: identity, state, gang, times, failure summary and links."""
    state = run.status()
    view = run.view
    started = view.started or run.record.created
    ended = view.ended if state.terminal else None
    failure = run.record.failure
    return {
        "id": run.id,
        "name": run.spec.name,
        "state": state.value,
        "backend": run.record.backend,
        "nodes": run.spec.nodes,
        "procs": run.spec.procs,
        "world_size": run.spec.world_size,
        "created": run.record.created,
        "started": started,
        "ended": ended,
        "duration": (ended or time.time()) - started,
        "attempt": view.attempt,
        "step": max((i.last_step for i in view.ranks.values() if i.last_step is not None), default=None),
        "total": view.total,
        "failure": _failure_summary(failure) if failure else None,
        "notebook": run.record.notebook.get("path"),
        "tracking_url": _tracking_url(run),
        "attach_code": f"import nbtrain\nrun = nbtrain.attach({run.id!r})\nrun.show()",
        "can_resume": state.value in ("failed", "cancelled") and bool(view.checkpoints),
    }


def _failure_summary(data: dict[str, Any]) -> str:
    from nbtrain.model import Failure

    return Failure.from_dict(data).summary()


def _tracking_url(run: Run) -> str | None:
    try:
        from nbtrain.tracking import tracking_url
    except ImportError:
        return None
    try:
        return tracking_url(run.record, store=run.store)
    except Exception:  # noqa: BLE001 - a link is optional
        return None


def run_detail(run: Run) -> dict[str, Any]:
    """The summary plus spec, attempts, checkpoints, last metrics and the full failure."""
    detail = run_summary(run)
    detail.update(
        spec=run.spec.to_dict(),
        bundle_digest=run.record.bundle_digest,
        attempts=run.attempts(),
        checkpoints=run.checkpoints(),
        last_metrics=run.view.last_metrics(0),
        notices=list(run.view.notices),
        failure_detail=run.record.failure,
    )
    return detail


class RunCache:
    """Run handles by id, synced incrementally (each event is read from disk once per server)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._runs: dict[str, Run] = {}
        self._lock = threading.Lock()

    def get(self, run_id: str) -> Run:
        """The handle of ``run_id`` (a unique prefix works); RunNotFoundError when unknown."""
        full = self.store.resolve(run_id)
        record = self.store.load(full)
        with self._lock:
            run = self._runs.get(full)
            if run is None or run.record.handle != record.handle:
                # new, or resumed by another process: the handle (and its attempt) changed
                run = self._runs[full] = Run(record, self.store)
        run.record = record
        run.sync()
        return run

    def all(self) -> list[Run]:
        """Every run in the store, newest first."""
        return [self.get(run_id) for run_id in self.store.ids()]
