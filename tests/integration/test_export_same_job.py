"""The exported job and the notebook cell are the same job: same seed, same losses.

One seeded 1x2 CPU training cell runs in a real kernel; then its exports run three ways:
the .ipynb export through `nbtrain submit --wait` (same final loss), the live `%nbtrain export`
through `nbtrain submit --param STEPS=2` (the loss of the kernel run's second step), and the
export's train.py under plain `accelerate launch ... --STEPS 3` (the loss of the third step).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

pytestmark = pytest.mark.slow

IMPORTS = """import torch
import torch.nn as nn
from accelerate import Accelerator
"""
PARAMETERS = """LR = 0.05
STEPS = 4
SEED = 7
"""
HELPERS = '''class TinyNet(nn.Module):
    """4 -> 8 -> 1."""

    def __init__(self, hidden=8):
        super().__init__()
        self.fc = nn.Linear(4, hidden)
        self.out = nn.Linear(hidden, 1)

    def forward(self, x):
        return self.out(torch.relu(self.fc(x)))


def make_batch(rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    x = torch.randn(16, 4, generator=g)
    return x, x.sum(1, keepdim=True) * 0.5
'''
CELL = """%%distributed --nodes 1 --gpus 2 --name same --out run --block
accelerator = Accelerator()
torch.manual_seed(SEED)
model = TinyNet()
opt = torch.optim.SGD(model.parameters(), lr=LR)
model, opt = accelerator.prepare(model, opt)
for step in range(STEPS):
    x, y = make_batch(accelerator.process_index, step)
    loss = ((model(x) - y) ** 2).mean()
    accelerator.backward(loss)
    opt.step()
    opt.zero_grad()
    global_loss = accelerator.reduce(loss.detach(), "mean").item()
    accelerator.log({"loss": global_loss}, step=step)
accelerator.print(f"FINAL_LOSS {global_loss!r}")
"""


def _nbtrain(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nbtrain", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=240)


def test_cell_and_its_exports_give_the_same_losses(shell: Any, run_cell: Any, tmp_path: Path) -> None:
    for cell in (IMPORTS, PARAMETERS, HELPERS, CELL):
        run_cell(cell)
    run = shell.user_ns["run"]
    losses = [value for _, value in run.metrics()["loss"]]
    assert len(losses) == 4

    # export from the live kernel (%nbtrain export), then from the notebook file on disk
    live_dir = tmp_path / "live-job"
    run_cell(f"%nbtrain export --out {live_dir} --params LR,STEPS,SEED")
    assert "_nbtrain_parameters" in (live_dir / "train.py").read_text()
    notebook = tmp_path / "same.ipynb"
    cells = [new_code_cell("%load_ext nbtrain"), new_code_cell(IMPORTS),
             new_code_cell(PARAMETERS, metadata={"tags": ["parameters"]}), new_code_cell(HELPERS), new_code_cell(CELL)]
    nbformat.write(new_notebook(cells=cells), str(notebook))
    exported = _nbtrain("export", str(notebook), "-o", str(tmp_path / "static-job"), "--json")
    assert exported.returncode == 0, exported.stderr
    static_dir = Path(json.loads(exported.stdout)["directory"])

    # 1. the .ipynb export through nbtrain submit: the same final loss
    done = _nbtrain("submit", str(static_dir), "--wait", "--json")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout[done.stdout.index("{"):])
    assert status["state"] == "succeeded" and status["world_size"] == 2
    assert status["last_metrics"]["loss"] == pytest.approx(losses[-1], rel=1e-6)

    # 2. the live export with a parameter: two steps give the kernel run's second loss
    two = _nbtrain("submit", str(live_dir), "--wait", "--json", "--param", "STEPS=2")
    assert two.returncode == 0, two.stderr
    assert json.loads(two.stdout[two.stdout.index("{"):])["last_metrics"]["loss"] == pytest.approx(losses[1], rel=1e-6)

    # 3. train.py alone under plain accelerate launch (CPU gang), with an option
    env = dict(os.environ, ACCELERATE_USE_CPU="1", TMPDIR=str(tmp_path))
    plain = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
         "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
         "--main_process_port", "0", "train.py", "--STEPS", "3"],
        cwd=static_dir, capture_output=True, text=True, env=env, timeout=240,
    )
    assert plain.returncode == 0, plain.stderr[-3000:]
    found = re.findall(r"FINAL_LOSS (\S+)", plain.stdout)
    assert len(found) == 1  # accelerator.print: the main process only
    assert float(found[0]) == pytest.approx(losses[2], rel=1e-6)
