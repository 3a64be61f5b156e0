"""Exactly-once forwarding of a real gang: the kernel killed mid-run, the tracking agent killed mid-run, two forwarders.

MLflow's history must hold each step once, with the values the gang reported, whoever forwarded. Forwarding
happens in the run's tracking agent (a detached process started at submit), so a kernel that dies loses
nothing; an agent that dies is replaced by the next attach, which goes on from the ledger.
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

import pytest
from procs import pids_with_env  # tests/support, put on sys.path by tests/conftest.py

import nbtrain
from nbtrain.tracking import TrackingForwarder

pytestmark = pytest.mark.slow

MIN_STEPS = 30

# Runs until the test drops the STOP file (at least MIN_STEPS steps, at most 600): robust to a slow machine.
BODY = '''import os
import time
import torch
from accelerate import Accelerator
accelerator = Accelerator()
for step in range(600):
    accelerator.reduce(torch.ones(1), "sum")
    accelerator.log({"loss": 1.0 / (step + 1), "step_x2": 2.0 * step}, step=step)
    stop = accelerator.reduce(torch.tensor([float(os.path.exists(STOP))]), "sum").item() > 0
    if step + 1 >= MIN_STEPS and stop:
        break
    time.sleep(0.1)
'''
CELL = "%%distributed --nodes 1 --gpus 2 --name once --out run --no-monitor --experiment once\n" + BODY

# A "kernel" that submits the cell and watches the run (run.wait), killed by the test mid-run.
KERNEL = '''
import sys
from nbtrain.bundle import capture_cell
from nbtrain.client import submit_bundle
from nbtrain.spec import JobSpec
body, stop, min_steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
bundle = capture_cell(body, {"STOP": stop, "MIN_STEPS": min_steps, "__name__": "__main__"})
run = submit_bundle(bundle, JobSpec(name="once", procs_per_node=2, device="cpu", experiment="once"))
print(run.id, flush=True)
run.wait(progress=False)
'''


@pytest.fixture
def sqlite_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    for name in [k for k in os.environ if k.startswith("MLFLOW_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def _history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    from mlflow import MlflowClient

    return sorted((m.step, m.value) for m in MlflowClient(tracking_uri=uri).get_metric_history(run_id, key))


def _forwarded(run: Any) -> int:
    """Rank 0's highest event sequence number whose points MLflow accepted (from the ledger)."""
    try:
        return int(json.loads((run.store.run_dir(run.id) / "tracking.json").read_text())["hwm"].get("rank-0|0", 0))
    except (OSError, ValueError, KeyError):
        return 0


def _until(condition: Any, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _status(uri: str, run_id: str) -> str:
    from mlflow import MlflowClient

    return str(MlflowClient(tracking_uri=uri).get_run(run_id).info.status)


def _assert_once(uri: str, run: Any) -> None:
    received = run.metrics(0)
    steps = len(received["loss"])
    assert steps >= MIN_STEPS
    for key in ("loss", "step_x2"):
        history = _history(uri, run.record.tracking_run_id, key)
        assert [s for s, _ in history] == list(range(steps)), f"{key}: steps missing or repeated"
        assert history == received[key]
    assert _history(uri, run.record.tracking_run_id, "nbtrain.attempt") == [(0, 0.0)]
    assert _status(uri, run.record.tracking_run_id) == "FINISHED"


def _submit(shell: Any, run_cell: Any, stop: Path) -> Any:
    shell.user_ns.update(STOP=str(stop), MIN_STEPS=MIN_STEPS)
    run_cell(CELL)
    return shell.user_ns["run"]


def _agents(run_id: str) -> list[int]:
    return pids_with_env("NBTRAIN_TRACKING_OF", {run_id})


@pytest.fixture
def tracked(home: Path, sqlite_here: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("NBTRAIN_TRACKING", "1")  # after `home`, which turns tracking off for other tests
    return sqlite_here


def test_kernel_killed_mid_run_loses_and_repeats_nothing(tracked: str, tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL, BODY, str(stop), str(MIN_STEPS)], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert kernel.stdout is not None
        run_id = kernel.stdout.readline().strip()
        assert run_id, kernel.stderr.read() if kernel.stderr else ""
        run = nbtrain.attach(run_id, watch=False)  # reads only: no agent is started from here
        _until(lambda: _forwarded(run) >= 8)
    finally:
        kernel.kill()
        kernel.communicate(timeout=30)
    assert kernel.returncode == -9
    assert len(_agents(run_id)) == 1  # the agent outlives the kernel that started it
    before = _forwarded(run)
    _until(lambda: _forwarded(run) > before)  # and goes on forwarding with no kernel at all
    stop.touch()
    _until(lambda: run.status().terminal, 180)
    _until(lambda: not _agents(run_id), 120)  # exits once the MLflow run is complete
    assert (run.store.run_dir(run_id) / "tracking-agent.log").read_text().count("exiting (0)") == 1
    run.record = run.store.load(run_id)
    _assert_once(tracked, run)


def test_agent_killed_mid_run_is_replaced_on_attach(tracked: str, shell: Any, run_cell: Any, tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    run = _submit(shell, run_cell, stop)
    _until(lambda: len(_agents(run.id)) == 1 and _forwarded(run) >= 8)
    (first,) = _agents(run.id)
    os.kill(first, signal.SIGKILL)
    _until(lambda: not _agents(run.id))
    ledger = json.loads((run.store.run_dir(run.id) / "tracking.json").read_text())
    forwarded_before = ledger["hwm"]["rank-0|0"]
    assert ledger["mlflow_run_id"] and ledger["finalized"] is None
    assert run.status().value == "running"

    # a new kernel attaches: the dead agent is replaced, and the new one goes on from the ledger
    again = nbtrain.attach(run.id)
    _until(lambda: len(_agents(run.id)) == 1)
    assert _agents(run.id) != [first]
    _until(lambda: _forwarded(run) > forwarded_before)  # the new agent sends while the gang still runs
    stop.touch()
    assert again.wait(timeout=180, progress=False).value == "succeeded"
    again.wait_tracking()  # wait() returns at the verdict; MLflow completes after
    assert again.record.tracking_run_id == ledger["mlflow_run_id"]
    _assert_once(tracked, again)
    _until(lambda: not _agents(run.id))
    for handle in (run, again):
        handle.close()


def test_two_kernels_at_once_forward_once_and_hand_over(
    sqlite_here: str, shell: Any, run_cell: Any, tmp_path: Path
) -> None:
    stop = tmp_path / "stop"
    run = _submit(shell, run_cell, stop)
    first, second = nbtrain.attach(run.id), nbtrain.attach(run.id)
    forwarders = [TrackingForwarder(first), TrackingForwarder(second)]
    first.subscribe(forwarders[0].on_batch)
    second.subscribe(forwarders[1].on_batch)
    ledger = run.store.run_dir(run.id) / "tracking.json"
    deadline = time.monotonic() + 120
    holder = None
    while time.monotonic() < deadline:
        active = [f for f in forwarders if f.active]
        assert len(active) <= 1, "two forwarders held the lock at once"
        try:
            progress = json.loads(ledger.read_text())["hwm"].get("rank-0|0", 0)
        except (OSError, ValueError):
            progress = 0
        if active and progress >= 8:
            holder = active[0]
            break
        time.sleep(0.02)
    assert holder is not None, "no forwarder ever took the lock"
    assert run.status().value == "running"
    holder.close()  # the holding kernel goes away mid-run: the other one must take over
    other = forwarders[1] if holder is forwarders[0] else forwarders[0]
    other_run = second if other is forwarders[1] else first
    before = _forwarded(run)
    _until(lambda: other.active and _forwarded(run) > before)
    stop.touch()
    assert other_run.wait(timeout=120, progress=False).value == "succeeded"
    other_run.wait_tracking()  # wait() returns at the verdict; MLflow completes after
    assert other.flush(timeout=60), other.error
    assert not holder.active
    _assert_once(sqlite_here, other_run)
    other.close()
