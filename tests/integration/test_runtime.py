"""Worker-side guarantees: tampered bundles are refused before unpickling; metrics and environment reports."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from nbtrain.backends.base import RunHandle
from nbtrain.backends.local import LocalBackend
from nbtrain.bundle import capture_cell
from nbtrain.events import EventKind
from nbtrain.model import RunState
from nbtrain.spec import JobSpec
from nbtrain.store import Store

pytestmark = pytest.mark.slow


class Tripwire:
    """Unpickling this creates a file: proof that something was unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> Any:
        return (open, (self.path, "w"))


def _wait(backend: LocalBackend, handle: RunHandle, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = backend.status(handle)
        if status.state.terminal:
            return status
        time.sleep(0.2)
    raise AssertionError("run did not end")


def test_tampered_bundle_is_refused_before_unpickling(home: Path, tmp_path: Path) -> None:
    marker = tmp_path / "unpickled"
    bundle = capture_cell("print(trap)\n", {"__name__": "__main__", "trap": Tripwire(str(marker))})
    store = Store()
    directory = bundle.write(store.bundles)
    (directory / "objects.pkl").chmod(0o644)
    with open(directory / "objects.pkl", "ab") as handle:
        handle.write(b"\x00")  # one byte appended after the manifest was written
    backend = LocalBackend(store)
    run_id = store.new_run_id("tampered")
    handle = backend.submit(backend.plan(JobSpec(name="tampered", procs_per_node=2), str(directory), bundle.digest, run_id))
    status = _wait(backend, handle)
    assert status.state is RunState.FAILED
    assert status.failure.exc_type == "BundleIntegrityError"
    assert "objects.pkl" in status.failure.message
    assert not marker.exists(), "the worker unpickled a tampered bundle"


def test_metrics_from_nbtrain_log_in_both_forms_and_environment_reports(shell: Any, run_cell: Any) -> None:
    run_cell('''%%distributed --nodes 1 --gpus 2 --name logged --out run --block
import nbtrain
from accelerate import Accelerator
accelerator = Accelerator()
for step in range(5):
    nbtrain.log(step=step, total=5, accuracy=step / 10, rank_seen=accelerator.process_index)
    nbtrain.log({"loss": 1.0 / (step + 1)}, step=step)  # the form wandb.log / accelerator.log take
''')
    run = shell.user_ns["run"]
    assert run.metrics(1)["loss"] == [(s, 1.0 / (s + 1)) for s in range(5)]
    assert run.metrics(0)["accuracy"] == [(s, s / 10) for s in range(5)]
    assert run.metrics(1)["rank_seen"][-1] == (4, 1.0)
    assert run.view.total == 5
    envs = {e.rank: e.data for e in run.events() if e.kind is EventKind.ENV}
    assert set(envs) == {0, 1}
    for data in envs.values():
        assert data["python"] and data["torch"] and data["accelerate"] and data["device"] == "cpu" and data["host"]
