"""Every Accelerate tracker, unchanged, beside nbtrain: ``get_tracker("mlflow")`` logs artifacts and figures into
nbtrain's MLflow run; ``log_with`` W&B (offline) and TensorBoard record the same metrics the monitor shows; and the
W&B tracker plug-in (``nbtrain.trackers`` entry point, installed for real) gets nbtrain's own record of the run.
What W&B and TensorBoard wrote is read back from their local files with their own formats."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

pytest.importorskip("wandb")
pytest.importorskip("tensorboard")

CELL = '''%%distributed --nodes 1 --gpus 2 --name trackers --out run
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from pathlib import Path
from accelerate import Accelerator
accelerator = Accelerator(log_with=["mlflow", "wandb", "tensorboard"], project_dir="tb")
accelerator.init_trackers("own-project", config={"lr": 0.1, "layers": 2})
for step in range(3):
    accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
tracker = accelerator.get_tracker("mlflow")
if accelerator.is_main_process:
    Path("notes.txt").write_text("hello from rank 0")
    tracker.log_artifact("notes.txt", "extra")
    figure, axes = plt.subplots()
    axes.plot([3, 2, 1])
    tracker.log_figure(figure, "plots/curve.png")
accelerator.wait_for_everyone()
accelerator.end_training()
'''


@pytest.fixture
def trackers_env(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """MLflow's sqlite default in tmp_path, W&B offline into tmp_path/wb, the W&B plug-in installed for real."""
    from plugin_package import install_plugin_package  # tests/support

    for name in [k for k in os.environ if k.startswith(("MLFLOW_", "WANDB_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("NBTRAIN_TRACKING", "1")  # after `home`, which turns tracking off for other tests
    site = install_plugin_package(tmp_path, name="team-wandb-tracker", version="1.0", module="team_wandb_tracker",
                                  source="", group="nbtrain.trackers", entry="wandb",
                                  target="nbtrain.tracking.wandbplugin:WandbTracker")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    monkeypatch.setenv("WANDB_PROJECT", "team-project")  # enables the W&B plug-in
    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "wb").mkdir()
    monkeypatch.chdir(tmp_path)
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def _wandb_runs(root: Path) -> dict[str, Path]:
    return {p.name.split("-", 3)[3]: p for p in (root / "wandb").glob("offline-run-*")}  # offline-run-DATE_TIME-ID


def test_every_tracker_holds_what_the_monitor_shows(trackers_env: str, shell: Any, run_cell: Any, tmp_path: Path,
                                                   home: Path) -> None:
    import wandbfile  # tests/support
    from agentfiles import await_agent_exit, await_json
    from mlflow import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_cell(CELL)
    run = shell.user_ns["run"]
    assert run.wait(timeout=240, progress=False).value == "succeeded", run.summary()
    shown = run.metrics()["loss"]
    assert shown == [(0, 1.0), (1, 0.5), (2, 1.0 / 3)]

    # MLflow: one run, nbtrain's, with the config, the artifact and the figure logged through get_tracker("mlflow")
    ledger = await_json(home / "runs" / run.id / "tracking.json", "finalized", {"attempt": 0, "state": "succeeded"})
    client = MlflowClient(tracking_uri=trackers_env)
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    assert [r.info.run_id for r in runs] == [ledger["mlflow_run_id"]]
    mlflow_id = runs[0].info.run_id
    assert runs[0].data.params["lr"] == "0.1"
    notes = Path(client.download_artifacts(mlflow_id, "extra/notes.txt", str(tmp_path / "dl")))
    assert notes.read_text() == "hello from rank 0"
    curve = Path(client.download_artifacts(mlflow_id, "plots/curve.png", str(tmp_path / "dl")))
    assert curve.read_bytes().startswith(b"\x89PNG")
    assert [(p.step, p.value) for p in client.get_metric_history(mlflow_id, "loss")] == shown

    # TensorBoard (Accelerate's tracker on rank 0), read with TensorBoard's own reader
    board = EventAccumulator(str(tmp_path / "tb" / "own-project"))
    board.Reload()
    assert [(e.step, pytest.approx(e.value)) for e in board.Scalars("loss")] == shown

    # W&B: Accelerate's tracker on rank 0, and nbtrain's W&B plug-in in the tracking agent (waited for: it finishes
    # the W&B run once the run is terminal)
    plugin_id = re.sub(r"[^A-Za-z0-9_-]", "-", run.id)
    await_json(home / "runs" / run.id / "tracking-wandb.json", "finished", [0, "succeeded"])
    found = _wandb_runs(tmp_path / "wb")
    assert len(found) == 2, found
    for run_dir in found.values():
        rows = [r for r in wandbfile.history(run_dir) if "loss" in r]
        assert [(r["_step"], pytest.approx(r["loss"])) for r in rows] == shown, run_dir
    plugin_files = found[plugin_id] / "files"
    assert (plugin_files / "extra" / "notes.txt").read_text() == "hello from rank 0"
    assert (plugin_files / "plots" / "curve.png").read_bytes() == curve.read_bytes()
    await_agent_exit(run.id)
