"""Hangs explain themselves: progress (not thread liveness) decides "stalled", stacks land in the triage,
--hang-timeout ends the run naming the stuck rank, and a skipped all-reduce is reported as a desync."""

from __future__ import annotations

import time
from typing import Any

import pytest

from nbtrain.errors import RunFailedError
from nbtrain.model import RunState

pytestmark = pytest.mark.slow

STUCK_CELL = '''%%distributed --nodes 1 --gpus 2 --name stuck --out run --stall-after 5 --hang-timeout 20
import time
import torch
import torch.distributed as dist
from accelerate import Accelerator
accelerator = Accelerator()
t = torch.ones(1)
dist.all_reduce(t)
nbtrain.log(step=0, ready=1.0)
if accelerator.process_index == 1:
    time.sleep(300)  # stuck in its own code: rank 0 waits in the next all_reduce
dist.all_reduce(t)
'''

DDP_STUCK_CELL = '''%%distributed --nodes 1 --gpus 2 --name ddpstuck --out run --stall-after 5 --hang-timeout 20
import time
import torch
from accelerate import Accelerator
accelerator = Accelerator()
model = accelerator.prepare(torch.nn.Linear(4, 1))
x = torch.ones(8, 4)
for _ in range(2):  # DDP rebuilds its buckets at the second forward (a collective of its own)
    accelerator.backward(model(x).sum())
nbtrain.log(step=0, ready=1.0)
loss = model(x).sum()
if accelerator.process_index == 1:
    time.sleep(300)  # stuck in its own code: rank 0 waits in DDP's gradient all-reduce inside backward
accelerator.backward(loss)
'''

GIL_CELL = '''%%distributed --nodes 1 --gpus 2 --name gil --out run --stall-after 5 --hang-timeout 15
import ctypes
import torch
import torch.distributed as dist
from accelerate import Accelerator
accelerator = Accelerator()
t = torch.ones(1)
if accelerator.process_index == 1:
    # a self-deadlock in C holding the GIL (PyDLL keeps it; a signal does not end a mutex wait, unlike sleep()):
    # no Python thread of this rank runs again, its heartbeat included
    libc, mutex = ctypes.PyDLL(None), ctypes.create_string_buffer(64)  # zeroed = PTHREAD_MUTEX_INITIALIZER
    libc.pthread_mutex_lock(mutex)
    libc.pthread_mutex_lock(mutex)
dist.all_reduce(t)
'''

DESYNC_CELL = '''%%distributed --nodes 1 --gpus 2 --name desync --out run --stall-after 3 --hang-timeout 8
import torch
import torch.distributed as dist
from accelerate import Accelerator
accelerator = Accelerator()
t = torch.ones(1)
dist.all_reduce(t)
if accelerator.process_index == 0:
    dist.all_reduce(t)  # rank 1 skips this one
'''


def test_a_rank_stuck_outside_a_collective_is_reported_then_ends_the_run_with_both_stacks(
        shell: Any, run_cell: Any) -> None:
    shell.run_cell("import nbtrain")
    run_cell(STUCK_CELL)
    run = shell.user_ns["run"]
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not run.view.metrics.get(0):
        run.sync()
        time.sleep(0.2)
    assert run.view.metrics.get(0), "the gang never reached its first all_reduce"
    ready = time.monotonic()
    stalled_at = None
    while time.monotonic() < ready + 30:
        snapshot = run.snapshot()
        # this stall, not one reported while a loaded machine was still starting the gang (--stall-after 5 also
        # covers "the whole gang silent since it started"; that one ends at the ranks' next heartbeat)
        if "rank 1 stuck outside any collective" in snapshot.detail:
            stalled_at = time.monotonic()
            break
        time.sleep(0.2)
    assert stalled_at is not None, f"never reported stalled: {run.snapshot()}"
    assert stalled_at - ready <= 2 * 5 + 2, "a stall must be reported within 2x --stall-after"
    snapshot = run.snapshot()
    assert "rank 1 stuck outside any collective" in snapshot.detail and "all_reduce" in snapshot.detail
    assert any(n.startswith("stalled:") for n in snapshot.notices)
    assert snapshot.state is RunState.STALLED
    assert run.status() is RunState.STALLED and 1 in run.stalled_ranks, (run.status(), run.stalled_ranks)
    assert "stuck)" in run._progress_text(RunState.STALLED)
    with pytest.raises(RunFailedError) as caught:
        run.wait(timeout=60, progress=False)
    ended = time.monotonic()
    assert ended - ready <= 30, "--hang-timeout 20 must end the run within 30 s"
    failure = caught.value.failure
    assert failure is not None and failure.rank == 1
    assert "hung:" in failure.reason and "--hang-timeout 20 s" in failure.reason
    stacks = failure.traceback or ""
    assert "rank 0:" in stacks and "rank 1:" in stacks
    rank0, rank1 = stacks.split("rank 1:", 1)[0], stacks.split("rank 1:", 1)[1]
    assert "in all_reduce" in rank0  # rank 0's main thread is inside torch's all_reduce
    assert "main.py" in rank1 and "outside any collective" in rank1  # rank 1 sits in the cell's own code
    # as a failure traceback reads: the cell's line and its text, not main.py's line alone
    assert "[cell line 11]" in rank1 and "time.sleep(300)" in rank1, rank1
    assert "[cell line 12]" in rank0 and "dist.all_reduce(t)" in rank0, rank0
    assert run.status() is RunState.FAILED


def test_a_skipped_all_reduce_is_reported_as_a_desync(shell: Any, run_cell: Any) -> None:
    run_cell(DESYNC_CELL)
    run = shell.user_ns["run"]
    with pytest.raises(RunFailedError) as caught:
        run.wait(timeout=120, progress=False)
    failure = caught.value.failure
    assert failure is not None
    text = failure.summary()
    assert "desynchronised collectives" in text, text
    assert "rank 1" in text


def test_a_rank_stuck_before_ddps_gradient_all_reduce_is_named_and_the_peer_seen_waiting_in_it(
        shell: Any, run_cell: Any) -> None:
    shell.run_cell("import nbtrain")
    run_cell(DDP_STUCK_CELL)
    run = shell.user_ns["run"]
    with pytest.raises(RunFailedError) as caught:
        run.wait(timeout=150, progress=False)
    failure = caught.value.failure
    assert failure is not None
    print(failure.summary())
    assert failure.rank == 1, failure.summary()
    assert "rank 1 stuck outside any collective" in failure.reason, failure.reason
    assert "rank 0 wait in DDP's gradient all_reduce (in backward)" in failure.reason, failure.reason


def test_a_rank_stuck_in_c_holding_the_gil_before_any_progress_is_stalled_with_its_stack(
        shell: Any, run_cell: Any) -> None:
    shell.run_cell("import nbtrain")
    run_cell(GIL_CELL)
    run = shell.user_ns["run"]
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and "rank 1 stuck" not in run.snapshot().detail:
        time.sleep(0.2)
    detail = run.snapshot().detail
    assert "rank 1 stuck outside any collective" in detail, detail  # judged although no rank ever progressed
    while time.monotonic() < deadline and "stacks of the stalled ranks" not in run.snapshot().detail:
        time.sleep(0.2)  # the stacks follow the stall notice (before --hang-timeout)
    detail = run.snapshot().detail
    assert "rank 1:" in detail and "main.py" in detail.split("rank 1:", 1)[1], detail
    with pytest.raises(RunFailedError) as caught:
        run.wait(timeout=60, progress=False)
    failure = caught.value.failure
    assert failure is not None and failure.rank == 1, failure
    stacks = failure.traceback or ""
    assert "rank 1:" in stacks, failure.summary()
    rank1 = stacks.split("rank 1:", 1)[1]
    assert "asked by the supervisor" in rank1 and "main.py" in rank1 and "in <module>" in rank1, rank1
    assert "main.py" in run.logs(rank=1)
