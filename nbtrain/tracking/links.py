"""The "Open in MLflow" link of a run (cheap: reads tracking.json, never imports mlflow)."""

from __future__ import annotations

from urllib.parse import quote

from nbtrain.secrets import redact_url
from nbtrain.store import RunRecord, Store
from nbtrain.tracking.ledger import Ledger

__all__ = ["LEDGER_NAME", "LOCK_NAME", "run_url", "tracking_url"]

LEDGER_NAME = "tracking.json"
LOCK_NAME = "tracking.lock"


def run_url(tracking_uri: str | None, experiment_id: str | None, mlflow_run_id: str | None) -> str | None:
    """The MLflow UI page of a run on an ``http(s)://`` tracking server; None for other stores.

    A local ``sqlite:///…/mlflow.db`` or ``file:`` store has no web server of its own (``mlflow ui`` in
    that directory shows it), so no link is invented for it. The link is for display: credentials in the
    tracking URI (``https://user:password@host``) are left out (:func:`nbtrain.secrets.redact_url`).
    """
    if not tracking_uri or not experiment_id or not mlflow_run_id:
        return None
    if not tracking_uri.startswith(("http://", "https://")):
        return None
    base = redact_url(tracking_uri).rstrip("/")
    return f"{base}/#/experiments/{quote(experiment_id, safe='')}/runs/{quote(mlflow_run_id, safe='')}"


def tracking_url(record: RunRecord, *, store: Store | None = None) -> str | None:
    """Link for the monitor's "Open in MLflow" button; None when unknown (not tracked yet, local store)."""
    ledger = Ledger.load((store or Store()).run_dir(record.run_id) / LEDGER_NAME)
    return run_url(ledger.tracking_uri, ledger.experiment_id, ledger.mlflow_run_id or record.tracking_run_id)
