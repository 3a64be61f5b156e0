"""Accelerate's tracker API without code changes: init_trackers' config becomes MLflow params of nbtrain's run,
and Accelerator(log_with="mlflow") does not create a second MLflow run from rank 0."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

CELL = '''%%distributed --nodes 1 --gpus 2 --name trackers --out run
from accelerate import Accelerator
accelerator = Accelerator(log_with="mlflow", project_dir=".")
accelerator.init_trackers("own-project", config={"lr": 0.1, "optim": {"name": "adam"}, "API_KEY": "sk_live_4eC39HqLyjWDarjtT1zdp7dc"})
for step in range(3):
    accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
'''


@pytest.fixture
def sqlite_tracking(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    for name in [k for k in os.environ if k.startswith("MLFLOW_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("NBTRAIN_TRACKING", "1")  # after `home`, which turns tracking off for other tests
    monkeypatch.chdir(tmp_path)
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_init_trackers_config_becomes_params_and_no_second_mlflow_run(sqlite_tracking: str, shell: Any,
                                                                     run_cell: Any) -> None:
    from mlflow import MlflowClient

    run_cell(CELL)
    run = shell.user_ns["run"]
    assert run.wait(timeout=180, progress=False).value == "succeeded"
    run.wait_tracking()  # wait() returns at the verdict; MLflow completes after
    client = MlflowClient(tracking_uri=sqlite_tracking)
    mlflow_run = client.get_run(run.record.tracking_run_id)
    params = mlflow_run.data.params
    assert params["lr"] == "0.1" and params["optim.name"] == "adam"
    assert params["API_KEY"] != "sk_live_4eC39HqLyjWDarjtT1zdp7dc"  # masked like every other param
    assert [p.value for p in client.get_metric_history(mlflow_run.info.run_id, "loss")] == [1.0, 0.5, 1.0 / 3]
    # Accelerate's own MLflow tracker was not started on rank 0: one MLflow run, in nbtrain's experiment
    assert client.get_experiment_by_name("own-project") is None
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    assert [r.info.run_id for r in runs] == [mlflow_run.info.run_id]
    assert any("Accelerate's own MLflow tracker is not started" in n for n in run.snapshot().notices)
    summary = run.summary()  # the config is shown in the notebook too, secret-looking values masked
    assert "config (init_trackers): lr=0.1, optim.name=adam, API_KEY=" in summary
    assert "sk_live_4eC39HqLyjWDarjtT1zdp7dc" not in summary


def test_with_no_tracking_the_users_own_mlflow_tracker_is_left_alone(sqlite_tracking: str, shell: Any, run_cell: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_TRACKING_URI", sqlite_tracking)  # where Accelerate's tracker on rank 0 records
    run_cell(CELL.replace("--out run", "--out run --no-tracking"))
    run = shell.user_ns["run"]
    assert run.wait(timeout=180, progress=False).value == "succeeded"
    run.wait_tracking()  # wait() returns at the verdict; MLflow completes after
    assert run.record.tracking_run_id is None  # nbtrain recorded nothing ...
    client = MlflowClient(tracking_uri=sqlite_tracking)
    experiment = client.get_experiment_by_name("own-project")
    assert experiment is not None, "... so the cell's own MLflow tracker must have run"
    [own] = client.search_runs([experiment.experiment_id])
    assert own.data.params["lr"] == "0.1"
    assert [p.value for p in client.get_metric_history(own.info.run_id, "loss")] == [1.0, 0.5, 1.0 / 3]
    assert not any("Accelerate's own MLflow tracker is not started" in n for n in run.snapshot().notices)
