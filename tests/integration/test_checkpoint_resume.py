"""Checkpoints, automatic restarts and resume with real CPU gangs."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from ckpt_gang import SETUP, TRAIN  # tests/support, put on sys.path by tests/conftest.py
from ckpt_gang import cell as _cell
from ckpt_gang import losses as _losses

pytestmark = pytest.mark.slow


def test_restart_from_checkpoint_reproduces_the_uninterrupted_run(shell: Any, run_cell: Any) -> None:
    run_cell(SETUP)
    run_cell(_cell("--name straight"))
    straight = shell.user_ns["run"]
    assert straight.wait(timeout=180).value == "succeeded"
    reference = _losses(straight)
    assert sorted(reference) == list(range(16))

    crash = 'if attempt == 0 and step == 9:\n        raise RuntimeError("simulated crash at step 9")'
    run_cell(_cell("--name restarted --max-restarts 1", crash))
    run = shell.user_ns["run"]
    assert run.wait(timeout=240).value == "succeeded"
    assert run.result() == 8  # attempt 1 restored the checkpoint of step 7
    first, second = _losses(run, 0), _losses(run, 1)
    assert sorted(first) == list(range(10)) and sorted(second) == list(range(8, 16))
    for step in range(16):  # same trajectory as without the crash (float tolerance)
        value = second.get(step, first.get(step))
        assert value == pytest.approx(reference[step], rel=1e-6), step
    history = run.attempts()
    assert [a["state"] for a in history] == ["failed", "succeeded"]
    assert "simulated crash at step 9" in history[0]["failure"]["message"]
    assert [c["step"] for c in run.checkpoints()] == [3, 7, 11, 15]


def test_restarts_exhausted_fail_with_full_history(shell: Any, run_cell: Any) -> None:
    run_cell(SETUP)
    crash = 'if step == 5:\n        raise ValueError(f"always fails (attempt {attempt})")'
    run_cell(_cell("--name doomed --max-restarts 1", crash))
    run = shell.user_ns["run"]
    assert run.wait(timeout=240, raise_on_failure=False).value == "failed"
    history = run.attempts()
    assert len(history) == 2 and all(a["state"] == "failed" for a in history)
    assert "always fails (attempt 0)" in history[0]["failure"]["message"]
    assert "always fails (attempt 1)" in history[1]["failure"]["message"]
    summary = run.summary()
    assert "attempt 0" in summary and "attempt 1" in summary


def _node_pids(run_id: str, node: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"NBTRAIN_RUN_ID={run_id}".encode() in env and f"NBTRAIN_NODE_RANK={node}".encode() in env:
            found.append(int(entry.name))
    return found


SLOW_TRAIN = TRAIN.replace("    CRASH", "    import time; time.sleep(0.3)")


def test_killing_a_node_restarts_the_gang_from_its_checkpoint(shell: Any, run_cell: Any) -> None:
    run_cell(SETUP)
    run_cell("%%distributed --nodes 2 --gpus 1 --out run --no-monitor --name nodekill --max-restarts 1\n" + SLOW_TRAIN)
    run = shell.user_ns["run"]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not run.checkpoints():
        time.sleep(0.2)
    assert run.checkpoints(), "no checkpoint was written"
    for pid in _node_pids(run.id, 1):  # node 1 dies: its launcher and its worker
        os.kill(pid, signal.SIGKILL)
    assert run.wait(timeout=240).value == "succeeded"
    history = run.attempts()
    assert len(history) == 2 and history[0]["state"] == "failed" and history[1]["state"] == "succeeded"
    first, second = _losses(run, 0), _losses(run, 1)
    resumed_at = min(second)
    assert resumed_at % 4 == 0 and resumed_at <= max(first) + 1  # from a checkpoint: no gap
    assert sorted(second) == list(range(resumed_at, 16))  # no duplicate within an attempt


@pytest.mark.parametrize("point", ["before-files", "mid-files", "before-latest"])
def test_kill_during_save_resumes_from_previous_checkpoint(shell: Any, run_cell: Any, point: str) -> None:
    run_cell(SETUP)
    run_cell(_cell(f"--name torn --env NBTRAIN_FAULT_INJECT=checkpoint:{point}:7"))
    run = shell.user_ns["run"]
    assert run.wait(timeout=180, raise_on_failure=False).value == "failed"
    assert run.failure is not None and run.failure.signal == "SIGKILL"
    root = Path(run.store.run_dir(run.id)) / "checkpoints"
    assert (root / "latest").read_text().strip() == "step-000000003"
    run.resume()
    assert run.wait(timeout=180, raise_on_failure=False).value == "failed"  # the fault fires again at step 7 ...
    assert _losses(run, 1) and min(_losses(run, 1)) == 4  # ... but attempt 1 started from step 3's checkpoint


def test_bit_flipped_checkpoint_is_skipped(shell: Any, run_cell: Any) -> None:
    run_cell(SETUP)
    run_cell(_cell("--name flipped"))
    run = shell.user_ns["run"]
    assert run.wait(timeout=180).value == "succeeded"
    root = Path(run.store.run_dir(run.id)) / "checkpoints"
    newest = root / (root / "latest").read_text().strip()
    manifest = json.loads((newest / "manifest.json").read_text())
    victim = newest / sorted(manifest["files"])[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.write_bytes(bytes(data))
    run.resume()
    assert run.wait(timeout=180).value == "succeeded"
    assert run.result() == 12  # step 15's checkpoint is corrupted: step 11's was used
    assert any("corrupted" in n and victim.name in n for n in run.view.notices)
