"""Tracking beside the run: `nbtrain submit` without --wait, no kernel attached, and the MLflow run is complete.

The submitting process exits at once; nothing watches the run. The run's tracking agent (a detached
process started at submit) forwards it to MLflow (a sqlite file named by MLFLOW_TRACKING_URI) and exits
once the MLflow run is complete. The test only polls the store until every process of the run is gone,
then reads MLflow with the real client.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook
from procs import pids_with_env  # tests/support, put on sys.path by tests/conftest.py

pytestmark = pytest.mark.slow

PARAMS = "LR = 0.25\nSTEPS = 12\n"
CELL = """%%distributed --nodes 1 --gpus 2 --name agent --experiment agent-study
import time
import torch
from accelerate import Accelerator
accelerator = Accelerator()
for step in range(STEPS):
    value = accelerator.reduce(torch.tensor([float(accelerator.process_index + step)]), "mean").item()
    accelerator.log({"loss": LR / (step + 1), "mean_rank_plus_step": value}, step=step)
    time.sleep(0.05)
print(f"rank {accelerator.process_index} trained at lr {LR}", flush=True)
"""


def nbtrain(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """`python -m nbtrain ARGS` in ``cwd`` (a terminal, a CI step: no kernel)."""
    return subprocess.run([sys.executable, "-m", "nbtrain", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd)


def _export(tmp_path: Path) -> Path:
    path = tmp_path / "agent-study.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell(PARAMS, metadata={"tags": ["parameters"]}), new_code_cell(CELL)]),
                   str(path))
    done = nbtrain("export", str(path), "-o", str(tmp_path / "job"), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return Path(json.loads(done.stdout)["directory"])


def _until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _ended(run_dir: Path) -> bool:
    try:
        return json.loads((run_dir / "attempts" / "0" / "status.json").read_text())["state"] in (
            "succeeded", "failed", "cancelled")
    except (OSError, ValueError, KeyError):
        return False


def _artifacts(client: Any, run_id: str, path: str | None = None) -> set[str]:
    out: set[str] = set()
    for item in client.list_artifacts(run_id, path):
        out |= _artifacts(client, run_id, item.path) if item.is_dir else {item.path}
    return out


def test_submit_without_wait_is_tracked_completely_with_no_kernel(home: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k.startswith("MLFLOW_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("NBTRAIN_TRACKING", "1")
    db = tmp_path / "tracked.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    job = _export(tmp_path)

    started = time.monotonic()
    done = nbtrain("submit", str(job), "--param", "LR=0.5", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 60  # returned without waiting for the gang (or for MLflow)
    run_id = done.stdout.split(":")[0]
    run_dir = home / "runs" / run_id

    # the agent dies (the OOM killer, a reboot): any nbtrain command that reads the run starts a new one, which
    # resumes from the ledger (every point still arrives once: checked below)
    _until(lambda: pids_with_env("NBTRAIN_TRACKING_OF", {run_id}), 60, "the tracking agent to start")
    for pid in pids_with_env("NBTRAIN_TRACKING_OF", {run_id}):
        os.kill(pid, signal.SIGKILL)
    _until(lambda: not pids_with_env("NBTRAIN_TRACKING_OF", {run_id}), 30, "the killed agent to be gone")
    assert nbtrain("status", run_id, cwd=tmp_path).returncode == 0
    assert pids_with_env("NBTRAIN_TRACKING_OF", {run_id}) or json.loads(
        (run_dir / "tracking.json").read_text()).get("finalized"), "`nbtrain status` did not restart the agent"

    # nothing watches the run: poll the store until the gang ended and every process of the run is gone
    _until(lambda: _ended(run_dir), 240, "the gang to end")
    _until(lambda: not pids_with_env("NBTRAIN_TRACKING_OF", {run_id}), 120, "the tracking agent to exit")
    _until(lambda: not (pids_with_env("NBTRAIN_RUN_ID", {run_id}) or pids_with_env("NBTRAIN_SUPERVISOR_OF", {run_id})),
           30, "the gang's processes to end")

    log = (run_dir / "tracking-agent.log").read_text()
    assert "the MLflow run is complete" in log and "exiting (0)" in log, log
    assert oct((run_dir / "tracking-agent.log").stat().st_mode & 0o777) == "0o600"
    ledger = json.loads((run_dir / "tracking.json").read_text())
    assert ledger["tracking_uri"] == f"sqlite:///{db}" and ledger["finalized"] == {"attempt": 0, "state": "succeeded"}
    record = json.loads((run_dir / "record.json").read_text())
    assert record["tracking_run_id"] == ledger["mlflow_run_id"]

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    mlflow_run = client.get_run(ledger["mlflow_run_id"])
    assert mlflow_run.info.status == "FINISHED" and mlflow_run.info.end_time
    assert client.get_experiment(mlflow_run.info.experiment_id).name == "agent-study"
    assert mlflow_run.info.run_name == run_id
    params = mlflow_run.data.params
    assert params["LR"] == "0.5" and params["STEPS"] == "12"  # --param over the parameters cell's literals
    assert params["nbtrain.nodes"] == "1" and params["nbtrain.procs_per_node"] == "2"
    assert params["nbtrain.name"] == "agent" and params["nbtrain.backend"] == "local"
    tags = mlflow_run.data.tags
    assert tags["nbtrain.run_id"] == run_id and tags["nbtrain.world_size"] == "2"
    assert tags["nbtrain.bundle_digest"] == record["bundle_digest"] and tags["nbtrain.worker.torch"]

    def history(key: str) -> list[tuple[int, float]]:
        return sorted((m.step, m.value) for m in client.get_metric_history(mlflow_run.info.run_id, key))

    assert history("loss") == [(s, 0.5 / (s + 1)) for s in range(12)]  # every step once, run with --param LR
    assert history("mean_rank_plus_step") == [(s, s + 0.5) for s in range(12)]
    assert history("nbtrain.attempt") == [(0, 0.0)]
    files = _artifacts(client, mlflow_run.info.run_id)
    assert {"bundle/main.py", "bundle/manifest.json", "logs/attempt-0/rank-0.log", "logs/attempt-0/rank-1.log"} <= files
    assert not any(f.startswith(("failure", "failures/")) for f in files)
    local = client.download_artifacts(mlflow_run.info.run_id, "logs/attempt-0/rank-1.log", str(tmp_path))
    assert "rank 1 trained at lr 0.5" in Path(local).read_text()


def _kubernetes_fixtures() -> Any:
    """tests/integration/kubernetes/conftest.py as a module (its ``running_cluster`` sets the fake cluster up)."""
    import importlib.util

    name = "nbtrain_tracking_kubernetes_fixtures"
    if name not in sys.modules:
        path = Path(__file__).resolve().parent / "kubernetes" / "conftest.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


K8S_BODY = """import time
from accelerate import Accelerator
accelerator = Accelerator()
for step in range(8):
    accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
    time.sleep(0.1)
print(f"pod rank {accelerator.process_index} done", flush=True)
"""


def test_kubernetes_run_is_tracked_by_its_agent_once_the_kernel_is_gone(home: Path, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent follows the run by attaching in its own process: with the kernel gone, it is the run's mirror."""
    pytest.importorskip("kubernetes", reason="the kubernetes client is not installed")
    from nbtrain.backends.kubernetes.backend import stop_mirrors
    from nbtrain.bundle import capture_cell
    from nbtrain.client import submit_bundle
    from nbtrain.spec import JobSpec
    from nbtrain.store import Store

    for name in [k for k in os.environ if k.startswith("MLFLOW_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("NBTRAIN_TRACKING", "1")
    db = tmp_path / "k8s.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    with _kubernetes_fixtures().running_cluster(tmp_path, monkeypatch):
        run = submit_bundle(capture_cell(K8S_BODY, {"__name__": "__main__"}),
                            JobSpec(name="k8s-tracked", nodes=2, backend="kubernetes", device="cpu",
                                    experiment="k8s-study"), store=Store(home))
        run.stop_watching()
        stop_mirrors()  # the kernel goes away: from now on only the agent follows the run
        status = home / "runs" / run.id / "attempts" / "0" / "status.json"
        assert not status.is_file() or json.loads(status.read_text())["state"] not in ("succeeded", "failed")
        _until(lambda: not pids_with_env("NBTRAIN_TRACKING_OF", {run.id}), 240, "the tracking agent to exit")
        log = (home / "runs" / run.id / "tracking-agent.log").read_text()
        assert "attempt 0 succeeded: the MLflow run is complete" in log, log
        assert json.loads(status.read_text())["state"] == "succeeded"  # the verdict of the agent's mirror

    from mlflow import MlflowClient

    ledger = json.loads((home / "runs" / run.id / "tracking.json").read_text())
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    mlflow_run = client.get_run(ledger["mlflow_run_id"])
    assert mlflow_run.info.status == "FINISHED"
    assert client.get_experiment(mlflow_run.info.experiment_id).name == "k8s-study"
    assert mlflow_run.data.tags["nbtrain.backend"] == "kubernetes"
    history = sorted((m.step, m.value) for m in client.get_metric_history(mlflow_run.info.run_id, "loss"))
    assert history == [(s, 1.0 / (s + 1)) for s in range(8)]
    files = _artifacts(client, mlflow_run.info.run_id)
    assert {"bundle/main.py", "logs/attempt-0/rank-0.log", "logs/attempt-0/rank-1.log"} <= files
    local = client.download_artifacts(mlflow_run.info.run_id, "logs/attempt-0/rank-1.log", str(tmp_path))
    assert "pod rank 1 done" in Path(local).read_text()
