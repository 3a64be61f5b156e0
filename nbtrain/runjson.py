"""A run as JSON: the one builder of the runs-list row and the run detail (``nbtrain runs/status --json``,
``nbtrain logs --all``'s status.json, the REST API's ``/runs`` and ``/runs/ID``).

The row is :class:`nbtrain.model.RunSummary` (schema: ``nbtrain/schemas/run-summary.schema.json``); the detail adds
the spec, the bundle, where the run came from, its attempts and checkpoints, its last metrics, notices and the
full failure. Secret-looking ``--env`` values are ``***`` (:func:`nbtrain.secrets.redact_env`): both are shown,
logged and pasted into issues, and the server shows them to read-only collaborators.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from nbtrain.model import json_safe
from nbtrain.reader import RunReader
from nbtrain.secrets import redact_env, shown_env

if TYPE_CHECKING:
    from nbtrain.spec import JobSpec

__all__ = ["DetailedRun", "run_detail", "run_summary", "spec_json"]


class DetailedRun(RunReader, Protocol):
    """What the detail reads beyond :class:`~nbtrain.reader.RunReader` (:class:`nbtrain.client.Run` is one)."""

    def attempts(self) -> list[dict[str, Any]]:
        """Every launch of the run with its state and failure."""
        ...

    def checkpoints(self) -> list[dict[str, Any]]:
        """Complete checkpoints written so far, by step."""
        ...


def spec_json(spec: JobSpec, *, may_write: bool = True) -> dict[str, Any]:
    """``spec.to_dict()`` with secret-looking ``--env`` values as ``***``; for a reader who may not write (start
    runs: a read-only REST user), every ``--env`` value but the ``--env-public`` ones (:func:`shown_env`)."""
    data: dict[str, Any] = spec.to_dict()
    env = data.get("env") or {}
    data["env"] = redact_env(env) if may_write else shown_env(env, spec.env_public)
    return data


def run_summary(run: RunReader) -> dict[str, Any]:
    """One row of the runs list (a RunSummary as JSON): identity, state, gang, times, failure and links.

    Asks the backend for the run's state (a terminal verdict is recorded on the way, as ``Run.status`` does).
    """
    snapshot = run.snapshot()
    return dict(json_safe(snapshot.summary(notebook=run.notebook, tracking_url=run.tracking_url()).to_json()))


def run_detail(run: DetailedRun, *, may_write: bool = True) -> dict[str, Any]:
    """The summary plus ``spec`` (redacted: :func:`spec_json` with ``may_write``), ``bundle_digest``,
    ``submitted_from`` (the notebook path and cell, or the job directory), ``attempts``, ``checkpoints``,
    ``last_metrics``, ``notices`` and ``failure_detail`` (JSON-safe)."""
    snapshot = run.snapshot()
    detail = snapshot.summary(notebook=run.notebook, tracking_url=run.tracking_url()).to_json()
    facts = run.facts()
    detail.update(
        spec=spec_json(run.spec, may_write=may_write),
        bundle_digest=facts.bundle_digest,
        submitted_from=dict(facts.submitted_from),
        attempts=run.attempts(),
        checkpoints=run.checkpoints(),
        last_metrics=dict(snapshot.last_metrics),
        notices=list(snapshot.notices),
        failure_detail=snapshot.failure.to_dict() if snapshot.failure else None,
    )
    return dict(json_safe(detail))
