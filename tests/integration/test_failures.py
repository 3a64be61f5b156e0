"""Rank failures and cancel: the first failing rank is named, and no process is left behind."""

from __future__ import annotations

import time
from typing import Any

import pytest

from nbtrain.errors import RunFailedError

pytestmark = pytest.mark.slow

RAISE_CELL = '''%%distributed --nodes 2 --gpus 2 --name boom --out run
import time
import torch
from accelerate import Accelerator
accelerator = Accelerator()
for step in range(200):
    accelerator.reduce(torch.ones(1), "sum")
    if step == 5 and accelerator.process_index == 3:
        raise ValueError("bad batch on rank three")
    time.sleep(0.05)
'''


def test_raising_rank_fails_the_gang_fast_and_is_named(shell: Any, run_cell: Any) -> None:
    run_cell(RAISE_CELL)
    run = shell.user_ns["run"]
    with pytest.raises(RunFailedError) as caught:
        run.wait(timeout=120)
    failure = caught.value.failure
    assert failure is not None
    assert failure.rank == 3 and failure.node == 1
    assert failure.exc_type == "ValueError"
    assert "bad batch on rank three" in failure.traceback
    assert "[cell line 9]" in failure.traceback  # main.py's frame points back at the user's cell
    assert failure.cell_line == 9  # the `raise` is line 9 of the cell as the user sees it
    assert "rank 3 (node 1) failed: ValueError: bad batch on rank three (cell line 9)" in str(caught.value)
    # the whole gang ended within 10 s of the raise
    raised_at = failure.time
    ended = run.view.ended
    assert raised_at is not None and ended is not None and ended - raised_at < 10
    assert "bad batch on rank three" in run.logs(3)


KILL_CELL = '''%%distributed --nodes 2 --gpus 2 --name killed --out run
import os, signal, time
import torch
from accelerate import Accelerator
accelerator = Accelerator()
for step in range(400):
    accelerator.reduce(torch.ones(1), "sum")
    if step == 10 and accelerator.process_index == 2:
        print("about to be killed", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.05)
'''


def test_signal_killed_rank_is_named_with_its_signal(shell: Any, run_cell: Any) -> None:
    run_cell(KILL_CELL)
    run = shell.user_ns["run"]
    assert run.wait(timeout=120, raise_on_failure=False).value == "failed"
    failure = run.failure
    assert failure is not None
    assert failure.rank == 2 and failure.signal == "SIGKILL"
    assert "about to be killed" in "\n".join(failure.last_lines)


SLOW_CELL = '''%%distributed --nodes 2 --gpus 2 --name slow --out run
import time
import torch
from accelerate import Accelerator
accelerator = Accelerator()
for step in range(10_000):
    accelerator.reduce(torch.ones(1), "sum")
    accelerator.log({"step_seen": step}, step=step)
    time.sleep(0.05)
'''


def test_cancel_ends_every_process(shell: Any, run_cell: Any, survivors: Any) -> None:
    run_cell(SLOW_CELL)
    run = shell.user_ns["run"]
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not run.metrics(3).get("step_seen"):
        time.sleep(0.2)
    assert run.metrics(3).get("step_seen"), "rank 3 never reported a step"
    run_cell("%nbtrain cancel " + run.id)
    assert run.status().value == "cancelled"
    assert survivors() == []
    run.cancel()  # idempotent
    assert run.status().value == "cancelled"


SEGV_CELL = '''%%distributed --nodes 1 --gpus 2 --name segv --out run
import ctypes, time
import torch
from accelerate import Accelerator
accelerator = Accelerator()
accelerator.wait_for_everyone()
if accelerator.process_index == 1:
    print("rank 1 about to crash in C", flush=True)
    ctypes.string_at(0)
time.sleep(30)
'''


def test_crash_in_c_keeps_last_words(shell: Any, run_cell: Any) -> None:
    run_cell(SEGV_CELL)
    run = shell.user_ns["run"]
    assert run.wait(timeout=120, raise_on_failure=False).value == "failed"
    failure = run.failure
    assert failure is not None and failure.rank == 1 and failure.signal == "SIGSEGV"
    log = run.logs(1)
    assert "rank 1 about to crash in C" in log
    assert "Segmentation fault" in log  # faulthandler's last words, written by the dying process
