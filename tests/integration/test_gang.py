"""A real 2x2 CPU gang from a real IPython shell: capture, sync, metrics, logs and result."""

from __future__ import annotations

import re
from typing import Any

import pytest

pytestmark = pytest.mark.slow

SETUP = '''
import os
import numpy as np
import torch as T
import torch.nn as nn
from collections import OrderedDict as OD
from dataclasses import dataclass
from accelerate import Accelerator

@dataclass
class Config:
    hidden: int = 8
    steps: int = 6

class Net(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc = nn.Linear(4, cfg.hidden)
        self.out = nn.Linear(cfg.hidden, 1)

    def forward(self, x):
        return self.out(T.relu(self.fc(x)))

SCALE = 0.5

def make_batch(rank, step):
    g = T.Generator().manual_seed(1000 * rank + step)
    x = T.randn(8, 4, generator=g)
    return x, x.sum(1, keepdim=True) * SCALE

DATA = np.arange(300_000, dtype=np.float64).reshape(1000, 300)
cfg = Config()
'''

CELL = '''%%distributed --nodes 2 --gpus 2 --name sync --out run
accelerator = Accelerator()
T.manual_seed(0)
model = Net(cfg)
opt = T.optim.SGD(model.parameters(), lr=0.05)
model, opt = accelerator.prepare(model, opt)
for step in range(cfg.steps):
    x, y = make_batch(accelerator.process_index, step)
    loss = ((model(x) - y) ** 2).mean()
    accelerator.backward(loss)
    opt.step()
    opt.zero_grad()
    accelerator.log({"loss": accelerator.reduce(loss.detach(), "mean").item()}, step=step)
checksum = sum(p.sum().item() for p in model.parameters())
print(f"rank {accelerator.process_index} done checksum={checksum:.10f}", flush=True)
os.write(1, b"c-level output from rank %d\\n" % accelerator.process_index)
assert isinstance(cfg, Config), type(cfg)
OD(data_sum=float(DATA.sum()), world=accelerator.num_processes, checksum=checksum)
'''


def test_two_by_two_gang_stays_in_sync(shell: Any, run_cell: Any, capsys: pytest.CaptureFixture[str]) -> None:
    run_cell(SETUP)
    run_cell(CELL)
    run = shell.user_ns["run"]
    assert "submitted 2 node(s) x 2 process(es)" in capsys.readouterr().out
    result = run.result(timeout=180)
    assert run.status().value == "succeeded"
    assert result["world"] == 4
    assert result["data_sum"] == float(sum(range(300_000)))

    # same global loss on every rank at every step
    per_rank = [run.metrics(rank)["loss"] for rank in range(4)]
    assert [s for s, _ in per_rank[0]] == list(range(6))
    for other in per_rank[1:]:
        assert other == per_rank[0]

    # every rank's own lines, C-level output included, and identical weights everywhere
    checksums = set()
    for rank in range(4):
        text = run.logs(rank)
        assert f"c-level output from rank {rank}" in text
        match = re.search(rf"rank {rank} done checksum=(\S+)", text)
        assert match, text[-2000:]
        checksums.add(match.group(1))
    assert len(checksums) == 1
    assert f"{result['checksum']:.10f}" in checksums

    # the CPU notice is said once, in the summary
    assert run.summary().count("no GPU used") == 1
