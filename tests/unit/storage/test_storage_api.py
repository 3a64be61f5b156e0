"""nbtrain.resolve / nbtrain.dataset_path in a worker: local paths for local roots, one dataset event each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import json, nbtrain
print(json.dumps([nbtrain.dataset_path("digits@v1"), nbtrain.resolve("dataset://digits@v1"),
                  nbtrain.resolve("dataset://raw"), nbtrain.resolve("checkpoint://team/x")]))
"""


def test_a_worker_gets_local_paths_and_reports_each_dataset_once(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NBTRAIN_")}
    env.update(NBTRAIN_RUN_ID="r-1", NBTRAIN_EVENTS_DIR=str(tmp_path / "events"), RANK="0",
               NBTRAIN_STORAGE_DATASETS=f"file://{tmp_path}/data", NBTRAIN_STORAGE_CHECKPOINTS="s3://b/ck",
               NBTRAIN_CONFIG=str(tmp_path / "none.toml"))
    (tmp_path / "events").mkdir()
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=60, check=True)
    assert json.loads(out.stdout) == [f"{tmp_path}/data/digits/v1", f"{tmp_path}/data/digits/v1",
                                      f"{tmp_path}/data/raw", "s3://b/ck/team/x"]
    lines = (tmp_path / "events" / "rank-0.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    datasets = [e["data"] for e in events if e["kind"] == "dataset"]
    assert [(d["name"], d["version"], d["datasets"]) for d in datasets] == [
        ("digits", "v1", ["digits@v1"]), ("raw", None, ["digits@v1", "raw"])]
    assert datasets[0]["url"] == f"file://{tmp_path}/data/digits/v1"


def test_outside_a_run_nothing_is_recorded_and_errors_name_the_fix(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NBTRAIN_")}
    env["NBTRAIN_CONFIG"] = str(tmp_path / "none.toml")
    probe = ("import nbtrain\ntry:\n    nbtrain.dataset_path('digits@v1')\n"
             "except Exception as e:\n    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.startswith("SpecError dataset://digits@v1 needs a datasets root but none is configured")
    assert "NBTRAIN_STORAGE_DATASETS" in out.stdout
