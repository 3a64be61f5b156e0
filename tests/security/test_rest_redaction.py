"""What the REST API shows any reader of the server holds no secret: env values masked, no URL credentials.

Before: the run detail carried ``--env`` values as given (a run with ``HF_TOKEN=hf_…`` showed the token to every
collaborator with read access) and the MLflow link kept ``user:password@``. A real jupyter server.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from nbtrain.spec import JobSpec
from nbtrain.store import RunRecord, Store

HF = "hf_" + "Qw7" * 12


@pytest.fixture
def jp_server_config(home: Path) -> dict[str, Any]:
    return {"ServerApp": {"jpserver_extensions": {"nbtrain": True}}}


async def test_run_detail_and_rows_show_no_secret(jp_fetch: Any, home: Path) -> None:
    from nbtrain.tracking.ledger import Ledger
    from nbtrain.tracking.links import LEDGER_NAME

    store, run_id = Store(home), "leaky-000001"
    spec = JobSpec(name="leaky", env={"HF_TOKEN": HF, "DATABASE_URL": "postgres://u:hunter2@db/x", "SEED": "5"},
                   allow_secrets=True)  # recorded with --allow-secrets (or before the --env refusal existed)
    store.save(RunRecord(run_id, spec, "0" * 64, "local", handle={"attempt": 0}, state="succeeded", ended=time.time()))
    ledger = Ledger.load(store.run_dir(run_id) / LEDGER_NAME)
    ledger.tracking_uri, ledger.experiment_id, ledger.mlflow_run_id = "https://bob:hunter2@ml.example", "3", "m1"
    ledger.save(store.run_dir(run_id) / LEDGER_NAME)

    detail_body = (await jp_fetch("nbtrain", "runs", run_id)).body
    list_body = (await jp_fetch("nbtrain", "runs")).body
    for body in (detail_body, list_body):
        assert HF.encode() not in body and b"hunter2" not in body
    detail = json.loads(detail_body)
    assert detail["spec"]["env"] == {"HF_TOKEN": "***", "DATABASE_URL": "***", "SEED": "5"}
    assert detail["tracking_url"] == "https://ml.example/#/experiments/3/runs/m1"
    assert json.loads(list_body)["runs"][0]["tracking_url"] == "https://ml.example/#/experiments/3/runs/m1"
