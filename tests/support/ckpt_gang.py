"""The small checkpointing gang the checkpoint/resume tests run (1 node x 2 CPU processes, 16 steps)."""

from __future__ import annotations

from typing import Any

__all__ = ["SETUP", "TRAIN", "cell", "losses"]

SETUP = '''
import os
import torch
import nbtrain
from accelerate import Accelerator
STEPS = 16

def batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(16, 8, generator=g)
    return x, x.sum(1, keepdim=True)
'''

# A training loop that checkpoints every 4 steps and resumes from its last checkpoint.
TRAIN = '''
accelerator = Accelerator()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
model, opt = accelerator.prepare(model, opt)
start = nbtrain.restore(accelerator)
attempt = int(os.environ["NBTRAIN_ATTEMPT"])
for step in range(start, STEPS):
    x, y = batch(step * accelerator.num_processes + accelerator.process_index)
    loss = ((model(x) - y) ** 2).mean()
    accelerator.backward(loss)
    opt.step()
    opt.zero_grad()
    accelerator.log({"loss": accelerator.reduce(loss.detach(), "mean").item()}, step=step)
    if step % 4 == 3:
        nbtrain.save_checkpoint(accelerator, step)
    CRASH
start
'''


def cell(flags: str, crash: str = "pass") -> str:
    """The %%distributed cell of :data:`TRAIN` with ``flags``; ``crash`` is code run after each step."""
    return f"%%distributed --nodes 1 --gpus 2 --out run --no-monitor {flags}\n" + TRAIN.replace("CRASH", crash)


def losses(run: Any, attempt: int | None = None) -> dict[int, float]:
    """``{step: loss}`` of ``run`` (of one attempt when given)."""
    points = run.view.metrics[0]["loss"]
    return {s: v for a, s, v in points if attempt is None or a == attempt}
