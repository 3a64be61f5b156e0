"""MLflow tracking of real gangs: success, failure and cancel, against MLflow's sqlite default and a real server.

Each gang is tiny (1 node x 2 processes, a few steps), submitted from a cell with tracking on, as a user
would: the run's tracking agent (a detached process started at submit) forwards it, ``run.wait()``
returns at the verdict and ``run.wait_tracking()`` once the MLflow run is complete. The sqlite case chdirs into tmp_path with no
MLFLOW_TRACKING_URI, so MLflow's own default (``sqlite:///mlflow.db`` there) is what gets used;
the server case points MLFLOW_TRACKING_URI at ``mlflow server`` on loopback (artifacts served by it).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from procs import pids_with_env  # tests/support, put on sys.path by tests/conftest.py

from nbtrain.tracking import tracking_url

# one worker under pytest-xdist: the module-scoped MLflow server (asked for by name in `tracking`) starts once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("tests/integration/test_tracking.py")]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``mlflow server`` on 127.0.0.1 (sqlite backend and artifacts in a temp dir); its URL."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    log = open(root / "server.log", "wb")  # closed in teardown
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{root / 'server.db'}", "--artifacts-destination", str(root / "artifacts")],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not come up: {(root / 'server.log').read_text()[-3000:]}")
            time.sleep(0.3)
        yield url
    finally:
        try:
            os.killpg(server.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=15)
        log.close()


@pytest.fixture(params=["sqlite-default", "server"])
def tracking(request: pytest.FixtureRequest, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Where runs are tracked: MLflow's default store in the working directory, or a tracking server."""
    for name in [k for k in os.environ if k.startswith("MLFLOW_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("NBTRAIN_TRACKING", "1")  # after `home`, which turns tracking off for other tests
    monkeypatch.chdir(tmp_path)
    if request.param == "server":
        url = request.getfixturevalue("mlflow_server")
        monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
        return str(url)
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def _client(uri: str) -> Any:
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _artifacts(client: Any, run_id: str, path: str | None = None) -> set[str]:
    """Every artifact file path of ``run_id`` (recursive)."""
    out: set[str] = set()
    for item in client.list_artifacts(run_id, path):
        if item.is_dir:
            out |= _artifacts(client, run_id, item.path)
        else:
            out.add(item.path)
    return out


def _artifact_text(client: Any, run_id: str, path: str, tmp: Path) -> str:
    local = client.download_artifacts(run_id, path, str(tmp))
    return Path(local).read_text()


def _history(client: Any, run_id: str, key: str) -> list[tuple[int, float]]:
    points = client.get_metric_history(run_id, key)
    return sorted((m.step, m.value) for m in points)


def _agent_done(run: Any, timeout: float = 60.0) -> None:
    """The run's tracking agent exits once the MLflow run is complete."""
    deadline = time.monotonic() + timeout
    while pids_with_env("NBTRAIN_TRACKING_OF", {run.id}):
        assert time.monotonic() < deadline, "the tracking agent did not exit"
        time.sleep(0.1)


def _git_repo(path: Path) -> str:
    path.mkdir(parents=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for argv in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(["git", "-C", str(path), *argv], check=True, env=env, capture_output=True)
    return subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


SUCCESS_SETUP = '''
import time
import torch
from accelerate import Accelerator
LR = 0.05
OPTIMIZER = "adam"
LAYERS = [8, 4]
STEPS = 12
'''

SUCCESS_CELL = '''%%distributed --nodes 1 --gpus 2 --name tracked --out run --no-monitor
accelerator = Accelerator()
for step in range(STEPS):
    value = accelerator.reduce(torch.tensor([float(accelerator.process_index + step)]), "mean").item()
    accelerator.log({"loss": LR / (step + 1), "mean_rank_plus_step": value}, step=step)
    time.sleep(0.05)
print(f"rank {accelerator.process_index} trained with {OPTIMIZER} {LAYERS}", flush=True)
'''


def test_successful_run_is_fully_tracked(tracking: str, shell: Any, run_cell: Any, tmp_path: Path) -> None:
    commit = _git_repo(tmp_path / "project")
    shell.user_ns["__session__"] = str(tmp_path / "project" / "digits-study.ipynb")
    run_cell(SUCCESS_SETUP)
    run_cell(SUCCESS_CELL)
    run = shell.user_ns["run"]
    assert run.wait(timeout=120, progress=False).value == "succeeded"
    run.wait_tracking()  # wait() returns at the verdict; MLflow completes after

    client = _client(tracking)
    mlflow_run = client.get_run(run.record.tracking_run_id)
    assert run.store.load(run.id).tracking_run_id == mlflow_run.info.run_id
    assert mlflow_run.info.status == "FINISHED"
    assert client.get_experiment(mlflow_run.info.experiment_id).name == "digits-study"  # the notebook's name
    assert mlflow_run.info.run_name == run.id

    params = mlflow_run.data.params
    assert {k: params[k] for k in ("LR", "OPTIMIZER", "LAYERS", "STEPS")} == {
        "LR": "0.05", "OPTIMIZER": "adam", "LAYERS": "[8, 4]", "STEPS": "12"}
    assert params["nbtrain.nodes"] == "1" and params["nbtrain.procs_per_node"] == "2"
    assert params["nbtrain.name"] == "tracked" and params["nbtrain.backend"] == "local"

    tags = mlflow_run.data.tags
    manifest = run.store.bundles / run.record.bundle_digest / "manifest.json"
    assert tags["nbtrain.run_id"] == run.id
    assert tags["nbtrain.bundle_digest"] == run.record.bundle_digest
    assert tags["nbtrain.notebook"] == tags["mlflow.source.name"] == shell.user_ns["__session__"]
    assert tags["nbtrain.cell_sha256"] in manifest.read_text()
    assert tags["nbtrain.git_commit"] == tags["mlflow.source.git.commit"] == commit
    assert tags["nbtrain.world_size"] == "2" and tags["nbtrain.nodes"] == "1" and tags["nbtrain.procs"] == "2"
    assert tags["nbtrain.backend"] == "local"
    import accelerate
    import torch

    assert tags["nbtrain.torch"] == torch.__version__ == tags["nbtrain.worker.torch"]
    assert tags["nbtrain.accelerate"] == accelerate.__version__
    assert tags["nbtrain.python"] == tags["nbtrain.worker.python"] and tags["nbtrain.version"]

    received = run.metrics(0)
    for name in ("loss", "mean_rank_plus_step"):
        assert _history(client, mlflow_run.info.run_id, name) == received[name]
        assert len(received[name]) == 12
    assert _history(client, mlflow_run.info.run_id, "nbtrain.attempt") == [(0, 0.0)]

    files = _artifacts(client, mlflow_run.info.run_id)
    assert {"bundle/main.py", "bundle/manifest.json", "logs/attempt-0/rank-0.log", "logs/attempt-0/rank-1.log"} <= files
    assert not any(f.startswith(("failure", "failures/")) for f in files)
    log = _artifact_text(client, mlflow_run.info.run_id, "logs/attempt-0/rank-1.log", tmp_path)
    assert "rank 1 trained with adam [8, 4]" in log
    expected_url = f"{tracking}/#/experiments/{mlflow_run.info.experiment_id}/runs/{mlflow_run.info.run_id}"
    assert tracking_url(run.record) == (expected_url if tracking.startswith("http") else None)
    if not tracking.startswith("http"):
        assert (tmp_path / "mlflow.db").is_file()  # MLflow's own default store, where `mlflow ui` looks
    # run.wait() returns at the verdict: the agent completing the MLflow run in the background is said once, and
    # nothing else about MLflow (no tracking problem) is
    background = [n for n in run.view.notices if "completing its MLflow run in the background" in n]
    assert len(background) <= 1, run.view.notices
    assert not [n for n in run.view.notices if "MLflow" in n and n not in background], run.view.notices
    _agent_done(run)


FAIL_CELL = '''%%distributed --nodes 1 --gpus 2 --name tracked-boom --out run --no-monitor --experiment failures
import time
import torch
from accelerate import Accelerator
accelerator = Accelerator()
for step in range(100):
    accelerator.reduce(torch.ones(1), "sum")
    accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
    if step == 3 and accelerator.process_index == 1:
        raise ValueError("bad batch on rank one")
    time.sleep(0.05)
'''


def test_failed_run_has_failure_report_and_failed_status(tracking: str, shell: Any, run_cell: Any, tmp_path: Path) -> None:
    run_cell(FAIL_CELL)
    run = shell.user_ns["run"]
    assert run.wait(timeout=120, raise_on_failure=False, progress=False).value == "failed"
    run.wait_tracking()  # wait() returns at the verdict; MLflow completes after

    client = _client(tracking)
    mlflow_run = client.get_run(run.record.tracking_run_id)
    assert mlflow_run.info.status == "FAILED"
    assert client.get_experiment(mlflow_run.info.experiment_id).name == "failures"
    files = _artifacts(client, mlflow_run.info.run_id)
    assert {"failure.json", "failure.txt", "failures/attempt-0.json", "bundle/main.py",
            "logs/attempt-0/rank-1.log"} <= files
    report = _artifact_text(client, mlflow_run.info.run_id, "failure.txt", tmp_path)
    assert "rank 1 (node 0) failed: ValueError: bad batch on rank one (cell line 10)" in report
    assert "Traceback" in report and "raise ValueError" in report
    assert _history(client, mlflow_run.info.run_id, "loss") == run.metrics(0)["loss"]
    _agent_done(run)


SLOW_CELL = '''%%distributed --nodes 1 --gpus 2 --name tracked-cancel --out run --no-monitor
import time
import torch
from accelerate import Accelerator
accelerator = Accelerator()
for step in range(10_000):
    accelerator.reduce(torch.ones(1), "sum")
    accelerator.log({"step_seen": step}, step=step)
    time.sleep(0.05)
'''


def test_cancelled_run_is_killed(tracking: str, shell: Any, run_cell: Any, survivors: Any) -> None:
    run_cell(SLOW_CELL)
    run = shell.user_ns["run"]
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and len(run.metrics(0).get("step_seen", [])) < 5:
        time.sleep(0.2)
    run.cancel()
    assert run.status().value == "cancelled"
    assert run.wait(timeout=60, progress=False).value == "cancelled"
    run.wait_tracking()  # wait() returns at the verdict; MLflow completes after
    client = _client(tracking)
    mlflow_run = client.get_run(run.record.tracking_run_id)
    assert mlflow_run.info.status == "KILLED"
    files = _artifacts(client, mlflow_run.info.run_id)
    assert "logs/attempt-0/rank-0.log" in files and "failure.json" not in files
    assert _history(client, mlflow_run.info.run_id, "step_seen") == run.metrics(0)["step_seen"]
    _agent_done(run)
    assert survivors() == []
