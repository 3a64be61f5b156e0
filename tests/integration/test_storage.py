"""Storage URIs with real parts: checkpoints on a local S3 server (moto, through s3fs), datasets from file://.

The S3 server is moto's server mode on 127.0.0.1 (tests/support/s3server.py); the gang's ranks reach it
as users reach S3, with AWS_* credentials and AWS_ENDPOINT_URL inherited from the kernel's environment.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ckpt_gang import SETUP, cell, losses  # tests/support, put on sys.path by tests/conftest.py
from procs import pids_with_env
from s3server import SECRET_KEY, S3Server, s3_server

pytestmark = pytest.mark.slow

BUCKET = "nbtrain-ckpt"


@pytest.fixture
def s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """A moto S3 server with one empty bucket; this process (and the gangs it starts) pointed at it."""
    with s3_server(tmp_path) as server:
        for name, value in server.env.items():
            monkeypatch.setenv(name, value)
        import fsspec

        fsspec.filesystem("s3", skip_instance_cache=True).mkdir(BUCKET)
        yield server


def _s3fs() -> Any:
    import fsspec

    return fsspec.filesystem("s3", skip_instance_cache=True)


def _files_containing(root: Path, needle: bytes) -> list[str]:
    found = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and needle in path.read_bytes():
                found.append(str(path))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("point", ["before-files", "mid-files", "before-latest"])
def test_kill_during_save_on_s3_resumes_from_the_last_complete_checkpoint(
        s3: S3Server, home: Path, shell: Any, run_cell: Any, point: str) -> None:
    run_cell(SETUP)
    run_cell(cell(f"--name torn-s3 --checkpoint-dir s3://{BUCKET}/runs "
                  f"--env NBTRAIN_FAULT_INJECT=checkpoint:{point}:7"))
    run = shell.user_ns["run"]
    assert run.wait(timeout=180, raise_on_failure=False).value == "failed"
    assert run.failure is not None and run.failure.signal == "SIGKILL"
    fs, root = _s3fs(), f"{BUCKET}/runs/{run.id}"
    assert fs.cat_file(f"{root}/latest").decode().strip() == "step-000000003"
    assert fs.exists(f"{root}/step-000000003/manifest.json")
    committed = [c["path"] for c in run.checkpoints()]
    assert committed == [f"s3://{root}/step-000000003"]
    if point == "before-latest":  # step 7 was copied and marked, but `latest` never moved to it
        assert fs.exists(f"{root}/step-000000007/manifest.json")
    else:  # the save died in staging: no step-7 directory exists
        assert not fs.exists(f"{root}/step-000000007")
    run.resume()
    assert run.wait(timeout=180, raise_on_failure=False).value == "failed"  # the fault fires again at step 7 ...
    assert losses(run, 1) and min(losses(run, 1)) == 4  # ... but attempt 1 started from step 3's checkpoint
    # credentials came from the environment and were written nowhere: not in the run's files, not on S3
    assert _files_containing(home, SECRET_KEY.encode()) == []
    assert all(SECRET_KEY.encode() not in fs.cat_file(key) for key in fs.find(BUCKET))


def test_s3_checkpoints_resume_to_the_same_result_and_keep_the_newest(s3: S3Server, shell: Any, run_cell: Any) -> None:
    run_cell(SETUP)
    crash = 'if attempt == 0 and step == 9:\n        raise RuntimeError("simulated crash at step 9")'
    run_cell(cell(f"--name s3-restart --max-restarts 1 --keep-checkpoints 2 --checkpoint-dir s3://{BUCKET}/r", crash))
    run = shell.user_ns["run"]
    assert run.wait(timeout=240).value == "succeeded"
    assert run.result() == 8  # attempt 1 restored the checkpoint of step 7 from S3
    fs, root = _s3fs(), f"{BUCKET}/r/{run.id}"
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(root, detail=False))
    assert names == ["latest", "step-000000011", "step-000000015"]  # --keep-checkpoints 2, no staging left
    assert fs.cat_file(f"{root}/latest").decode().strip() == "step-000000015"


def test_unavailable_checkpoint_url_is_refused_before_anything_starts(shell: Any, run_cell: Any, home: Path) -> None:
    run_cell(SETUP)
    with pytest.raises(Exception, match="--checkpoint-dir nosuch://b/p: fsspec knows no 'nosuch' protocol"):
        run_cell(cell("--name badurl --checkpoint-dir nosuch://b/p"))
    assert not (home / "runs").is_dir() or not any((home / "runs").iterdir())


DATASET_CELL = '''%%distributed --nodes 1 --gpus 2 --out run --no-monitor --name digits-run
import numpy as np
import nbtrain
from accelerate import Accelerator
accelerator = Accelerator()
path = nbtrain.dataset_path("digits@v1")
data = np.load(path + "/digits.npz")
accelerator.log({"rows": float(len(data["target"]))}, step=0)
path
'''


def test_dataset_uri_resolves_from_a_file_root_and_is_tagged_in_mlflow(
        home: Path, tmp_path: Path, shell: Any, run_cell: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from sklearn.datasets import load_digits

    for name in [k for k in os.environ if k.startswith(("MLFLOW_", "NBTRAIN_STORAGE_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("NBTRAIN_TRACKING", "1")
    monkeypatch.setenv("NBTRAIN_CONFIG", str(tmp_path / "no-user-config.toml"))
    monkeypatch.chdir(tmp_path)
    digits = load_digits()
    version = tmp_path / "datasets" / "digits" / "v1"
    version.mkdir(parents=True)
    import numpy as np

    np.savez(version / "digits.npz", data=digits.data, target=digits.target)
    (tmp_path / "nbtrain.toml").write_text(f'[storage]\ndatasets = "file://{tmp_path / "datasets"}"\n')
    run_cell(DATASET_CELL)
    run = shell.user_ns["run"]
    assert run.wait(timeout=180).value == "succeeded"
    assert run.result() == str(version)
    assert run.view.metrics[0]["rows"][0][2] == float(len(digits.target))
    deadline = time.monotonic() + 60  # the tracking agent exits once the MLflow run is complete
    while pids_with_env("NBTRAIN_TRACKING_OF", {run.id}):
        assert time.monotonic() < deadline, "the tracking agent did not exit"
        time.sleep(0.1)
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow_run = client.get_run(run.store.load(run.id).tracking_run_id)
    tags = mlflow_run.data.tags
    assert (tags["nbtrain.dataset"], tags["nbtrain.dataset_version"], tags["nbtrain.datasets"]) == (
        "digits", "v1", "digits@v1")
