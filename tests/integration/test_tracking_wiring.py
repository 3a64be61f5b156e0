"""MLflow tracking is on by default for a %%distributed cell: the run appears in MLflow's default store.

It is forwarded by the run's tracking agent, a detached process started at submit, never by the kernel.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from procs import pids_with_env  # tests/support, put on sys.path by tests/conftest.py

pytestmark = pytest.mark.slow


def test_cell_is_tracked_in_the_default_store(shell: Any, run_cell: Any, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBTRAIN_TRACKING", "1")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    run_cell('''%%distributed --nodes 1 --gpus 2 --name tracked --experiment wiring --out run --no-monitor
from accelerate import Accelerator
accelerator = Accelerator()
for step in range(6):
    accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
''')
    run = shell.user_ns["run"]
    assert len(pids_with_env("NBTRAIN_TRACKING_OF", {run.id})) == 1  # started at submit, in its own process
    assert run.wait(timeout=180).value == "succeeded"
    run.wait_tracking()  # wait() returns at the verdict; MLflow completes after
    assert not any(t.name.startswith("nbtrain-mlflow") for t in threading.enumerate())  # nothing forwarded here
    deadline = time.monotonic() + 120
    while pids_with_env("NBTRAIN_TRACKING_OF", {run.id}):  # the agent exits once the MLflow run is complete
        assert time.monotonic() < deadline, "the tracking agent did not exit"
        time.sleep(0.1)
    log = (run.store.run_dir(run.id) / "tracking-agent.log").read_text()
    assert "exiting (0)" in log, log
    assert (tmp_path / "mlflow.db").exists()
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    (found,) = client.search_runs([client.get_experiment_by_name("wiring").experiment_id])
    assert found.info.run_id == run.store.load(run.id).tracking_run_id and found.info.status == "FINISHED"
    history = [(m.step, m.value) for m in client.get_metric_history(found.info.run_id, "loss")]
    assert sorted(history) == run.metrics(0)["loss"]
    assert found.data.tags["nbtrain.run_id"] == run.id


def test_no_tracking_flag(shell: Any, run_cell: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBTRAIN_TRACKING", "1")
    monkeypatch.chdir(tmp_path)
    run_cell("%%distributed --dry-run --no-tracking\nx = 1\n")
    run_cell("%%distributed --nodes 1 --gpus 1 --no-tracking --out run --no-monitor --block\nx = 1\n")
    run = shell.user_ns["run"]
    assert run.record.tracking_run_id is None and not (tmp_path / "mlflow.db").exists()
    assert not (run.store.run_dir(run.id) / "tracking-agent.log").exists()  # no agent was started
