"""Checkpoints on every backend that honours them: saved by one attempt, restored by the next (an automatic restart
or a resume), listed by the handle. Kubernetes runs it with a PersistentVolumeClaim (see conftest.py)."""

from __future__ import annotations

import pytest
from helpers import BackendUnderTest

from nbtrain.model import RunState

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

# Checkpoints steps 0..4 on attempt 0, which then fails; a later attempt restores and returns where it started.
CHECKPOINT_CELL = '''import os
import torch
import nbtrain
from accelerate import Accelerator
accelerator = Accelerator()
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt = accelerator.prepare(model, opt)
start = nbtrain.restore(accelerator)
attempt = int(os.environ["NBTRAIN_ATTEMPT"])
print(f"attempt {attempt} starts at step {start}", flush=True)
for step in range(start, 5):
    if step % 2 == 0:
        nbtrain.save_checkpoint(accelerator, step)
if attempt == 0:
    raise RuntimeError("attempt 0 fails on purpose after its checkpoints")
start
'''


def _needs_checkpoints(under_test: BackendUnderTest) -> None:
    refused = {"max_restarts", "checkpoint_dir", "keep_checkpoints"} & set(under_test.refused)
    if refused:
        pytest.skip(f"{under_test.name} refuses {sorted(refused)} (test_refusals checks that it does)")


def test_an_automatic_restart_resumes_from_the_checkpoint_the_failed_attempt_saved(under_test: BackendUnderTest) -> None:
    _needs_checkpoints(under_test)
    run = under_test.submit(CHECKPOINT_CELL, name="checkpointed", procs_per_node=2, max_restarts=1)
    assert run.wait(timeout=240, progress=False) is RunState.SUCCEEDED, run.status()
    assert run.result(timeout=10) == 5  # attempt 1 restored step 4's checkpoint, saved by attempt 0
    assert [(a["attempt"], a["state"]) for a in run.attempts()] == [(0, "failed"), (1, "succeeded")]
    saved = [(c["step"], c["attempt"]) for c in run.checkpoints()]
    assert saved == [(0, 0), (2, 0), (4, 0)], saved


def test_resume_restores_the_checkpoint_of_the_failed_attempt(under_test: BackendUnderTest) -> None:
    _needs_checkpoints(under_test)
    run = under_test.submit(CHECKPOINT_CELL, name="resumed-checkpoint", procs_per_node=2)
    assert run.wait(timeout=120, raise_on_failure=False, progress=False) is RunState.FAILED
    assert [c["step"] for c in run.checkpoints()] == [0, 2, 4]
    run.resume()
    assert run.wait(timeout=120, progress=False) is RunState.SUCCEEDED, run.status()
    assert run.result(timeout=10) == 5
