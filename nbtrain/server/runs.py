"""Run summaries for the REST API and the runs panel (wire models, separate from persistence).

A row is :class:`nbtrain.model.RunSummary` (schema: ``nbtrain/schemas/run-summary.schema.json``), built
from the run's snapshot through the read interface (:class:`nbtrain.reader.RunReader`).
"""

from __future__ import annotations

import threading
from typing import Any

from nbtrain.client import Run
from nbtrain.model import json_safe
from nbtrain.reader import RunReader
from nbtrain.store import Store

__all__ = ["RunCache", "run_detail", "run_summary"]


def run_summary(run: RunReader) -> dict[str, Any]:
    """One row of the runs list (a RunSummary as JSON): identity, state, gang, times, failure and links.

    Asks the backend for the run's state (a terminal verdict is recorded on the way, as ``Run.status`` does).
    """
    return run.snapshot().summary(notebook=run.notebook, tracking_url=run.tracking_url()).to_json()


def run_detail(run: Run) -> dict[str, Any]:
    """The summary plus spec, attempts, checkpoints, last metrics, notices and the full failure (JSON-safe)."""
    snapshot = run.snapshot()
    detail = snapshot.summary(notebook=run.notebook, tracking_url=run.tracking_url()).to_json()
    detail.update(
        spec=run.spec.to_dict(),
        bundle_digest=run.record.bundle_digest,
        attempts=run.attempts(),
        checkpoints=run.checkpoints(),
        last_metrics=dict(snapshot.last_metrics),
        notices=list(snapshot.notices),
        failure_detail=snapshot.failure.to_dict() if snapshot.failure else None,
    )
    return dict(json_safe(detail))


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
