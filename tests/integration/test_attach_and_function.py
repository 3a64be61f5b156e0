"""Runs outlive the kernel: attach from a fresh Python process; and the decorated-function form."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ATTACH_SCRIPT = '''
import json, sys, nbtrain
run = nbtrain.attach(sys.argv[1])
first = run.status().value
run.wait(timeout=180)
print(json.dumps({"first": first, "final": run.status().value, "loss_steps": [s for s, _ in run.metrics(0)["loss"]],
                  "ids": [r.id for r in nbtrain.runs()], "result": run.result(), "log": run.logs(1)}))
'''

CELL = '''%%distributed --nodes 1 --gpus 2 --name attachable --out run
import time
import torch
from accelerate import Accelerator
accelerator = Accelerator()
for step in range(40):
    accelerator.reduce(torch.ones(1), "sum")
    accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
    print(f"line {step}", flush=True)
    time.sleep(0.1)
accelerator.process_index * 10 + 7
'''


def _attach_from_new_process(run_id: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", ATTACH_SCRIPT, run_id], capture_output=True, text=True,
                         timeout=240, env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_attach_to_running_then_finished_run(shell: Any, run_cell: Any) -> None:
    run_cell(CELL)
    run = shell.user_ns["run"]
    deadline = time.monotonic() + 60
    while run.status().value != "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    running = _attach_from_new_process(run.id[:-2])  # a unique prefix is enough
    assert running["first"] in ("running", "starting")
    assert running["final"] == "succeeded"
    assert running["loss_steps"] == list(range(40))
    assert running["result"] == 7
    assert running["ids"] == [run.id]
    assert [f"line {i}" for i in range(40)] == [x for x in running["log"].splitlines() if x.startswith("line ")]
    finished = _attach_from_new_process(run.id)
    assert finished["first"] == "succeeded"
    assert finished["loss_steps"] == list(range(40))


FUNCTION_SETUP = '''
import nbtrain
import torch
from accelerate import Accelerator

OFFSET = 100

def helper(x):
    return x + OFFSET

@nbtrain.distributed(nodes=2, gpus=1, name="fn")
def train(base, scale=1):
    accelerator = Accelerator()
    total = accelerator.reduce(torch.tensor([float(accelerator.process_index)]), "sum").item()
    return {"rank": accelerator.process_index, "value": helper(base) * scale, "total": total}
'''


def test_decorated_function_returns_rank0_value(shell: Any, run_cell: Any) -> None:
    run_cell(FUNCTION_SETUP)
    run = run_cell("train(5, scale=3)")
    assert run.result(timeout=180) == {"rank": 0, "value": 315, "total": 1.0}
    assert run.record.kind == "function"


KERNEL_SCRIPT = '''
import os, signal
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "nbtrain")
result = ip.run_cell("""%%distributed --nodes 2 --gpus 1 --name orphan --out run
import time
from accelerate import Accelerator
accelerator = Accelerator()
for step in range(30):
    accelerator.log({"loss": float(step)}, step=step)
    time.sleep(0.1)
""")
assert result.success, result
print(ip.user_ns["run"].id, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # the "kernel" dies right after submitting
'''


def test_run_survives_the_kernel_dying(home: Any) -> None:
    import nbtrain

    out = subprocess.run([sys.executable, "-c", KERNEL_SCRIPT], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ))
    assert out.returncode == -9, out.stderr[-2000:]
    run_id = [line for line in out.stdout.splitlines() if line.startswith("orphan-")][-1]
    run = nbtrain.attach(run_id)
    assert run.wait(timeout=120).value == "succeeded"
    assert [s for s, _ in run.metrics(0)["loss"]] == list(range(30))
