"""RunSummary, the one wire model of a run, against its JSON Schema and the fixtures the TypeScript tests share."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import jsonschema

from nbtrain.model import Failure, RunSnapshot, RunState, RunSummary

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "nbtrain" / "schemas" / "run-summary.schema.json").read_text())
FIXTURES = json.loads((ROOT / "tests" / "data" / "wire" / "run-summaries.json").read_text())


def test_the_schema_and_the_dataclass_have_the_same_fields() -> None:
    assert set(SCHEMA["properties"]) == {f.name for f in fields(RunSummary)} == set(SCHEMA["required"])


def test_the_shared_fixtures_are_valid_summaries() -> None:
    for row in FIXTURES:
        jsonschema.validate(row, SCHEMA)
        assert RunSummary(**row).to_json() == row


def test_a_snapshot_becomes_a_valid_summary_with_no_nan_or_infinity() -> None:
    snapshot = RunSnapshot(run_id="x-1", name="x", backend="local", state=RunState.FAILED, attempt=1, nodes=2, procs=2,
                           world_size=4, created=100.0, started=101.0, ended=float("inf"), step=3, total=None,
                           failure=Failure(reason="boom", rank=3, node=1), can_resume=True,
                           last_metrics={"loss": float("nan")})
    row = snapshot.summary(notebook="n.ipynb", now=200.0).to_json()
    jsonschema.validate(row, SCHEMA)
    assert row["failed_rank"] == 3 and row["failure"].startswith("rank 3 (node 1) failed")
    assert row["ended"] is None  # inf is not JSON
    text = json.dumps(row, allow_nan=False)  # raises on NaN/Infinity
    assert "NaN" not in text
