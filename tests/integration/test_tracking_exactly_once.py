"""Exactly-once forwarding of a real gang: a forwarding kernel killed mid-run, and two kernels at once.

MLflow's history must hold each step once, with the values the notebook received, whoever forwarded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import nbtrain
from nbtrain.tracking import TrackingForwarder

pytestmark = pytest.mark.slow

MIN_STEPS = 30

# Runs until the test drops the STOP file (at least MIN_STEPS steps, at most 600): robust to a slow machine.
CELL = '''%%distributed --nodes 1 --gpus 2 --name once --out run --no-monitor --experiment once
import os
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

# A second "kernel": attach, forward, and die by SIGKILL once some points reached MLflow.
DYING_KERNEL = '''
import json, os, signal, sys, time
from pathlib import Path
import nbtrain
from nbtrain.tracking import TrackingForwarder
run = nbtrain.attach(sys.argv[1])
forwarder = TrackingForwarder(run)
run.subscribe(forwarder.on_batch)
ledger = Path(run.store.run_dir(run.id)) / "tracking.json"
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    try:
        if json.loads(ledger.read_text())["hwm"].get("rank-0|0", 0) >= 8:
            break
    except (OSError, ValueError, KeyError):
        pass
    time.sleep(0.05)
print("forwarded", json.loads(ledger.read_text())["hwm"], flush=True)
os.kill(os.getpid(), signal.SIGKILL)
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


def test_forwarding_kernel_killed_mid_run_loses_and_repeats_nothing(
    sqlite_here: str, shell: Any, run_cell: Any, tmp_path: Path
) -> None:
    stop = tmp_path / "stop"
    run = _submit(shell, run_cell, stop)
    dying = subprocess.run([sys.executable, "-c", DYING_KERNEL, run.id], capture_output=True, text=True,
                           timeout=180, cwd=tmp_path, env=dict(os.environ))
    assert dying.returncode == -9, dying.stderr[-3000:]
    ledger = json.loads((run.store.run_dir(run.id) / "tracking.json").read_text())
    forwarded_before = ledger["hwm"]["rank-0|0"]
    assert ledger["mlflow_run_id"] and ledger["finalized"] is None
    assert run.status().value == "running"

    # a new kernel: a fresh handle and forwarder take over from the ledger and the lock the dead one left
    again = nbtrain.attach(run.id)
    forwarder = TrackingForwarder(again)
    again.subscribe(forwarder.on_batch)
    _until(lambda: _forwarded(run) > forwarded_before)  # the new forwarder sends while the gang still runs
    stop.touch()
    assert again.wait(timeout=120, progress=False).value == "succeeded"
    assert forwarder.flush(timeout=60), forwarder.error
    assert again.record.tracking_run_id == ledger["mlflow_run_id"]
    assert json.loads((run.store.run_dir(run.id) / "tracking.json").read_text())["hwm"]["rank-0|0"] > forwarded_before
    _assert_once(sqlite_here, again)
    forwarder.close()


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
    assert other.flush(timeout=60), other.error
    assert not holder.active
    _assert_once(sqlite_here, other_run)
    other.close()
