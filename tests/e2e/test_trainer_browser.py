"""A Hugging Face ``Trainer`` cell in a real JupyterLab: the monitor charts the Trainer's logged loss and its
progress against ``max_steps``, with no nbtrain code in the cell (tiny BERT from its config, data made in the cell).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

pytest.importorskip("transformers")

DATA_CELL = """import torch
class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        ids = torch.randint(0, 50, (8,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "attention_mask": torch.ones(8, dtype=torch.long), "labels": int(ids[0]) % 2}
"""

TRAINER_CELL = """%%distributed --nodes 1 --gpus 2 --name hf-browser --out run
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, vocab_size=50,
                    max_position_embeddings=16, num_labels=2)
args = TrainingArguments(output_dir="hf-out", max_steps=10, per_device_train_batch_size=4, logging_steps=2,
                         save_strategy="no", report_to="none", disable_tqdm=True)
Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=Tokens()).train()
"""

READ_MONITOR = """root => {
  const text = id => root.querySelector(`[data-testid="${id}"]`)?.textContent ?? "";
  const chart = root.querySelector('[data-testid="nbtrain-chart-loss"]');
  return {state: root.dataset.state ?? "", step: text("nbtrain-step"), points: Number(chart?.dataset.points ?? 0),
          latest: chart?.querySelector(".nbtrain-chart-latest")?.textContent ?? ""};
}"""


def _poll(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what} (last seen: {last!r})")


def test_monitor_charts_the_trainers_loss(page: Any, lab: Any, notebook: Callable[[str, list[str]], str],
                                          artifacts: Path, survivors: Callable[[], list[int]]) -> None:
    page.goto(lab.notebook_url(notebook("trainer.ipynb", ["%load_ext nbtrain", DATA_CELL, TRAINER_CELL])))
    page.locator(".jp-NotebookPanel").first.wait_for(timeout=60_000)
    statusbar = page.locator("#jp-main-statusbar")
    _poll(lambda: re.search(r"^(?!No Kernel).+ \| Idle$", statusbar.inner_text(), re.MULTILINE), 90, "an idle kernel")
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
    cell = page.locator(".jp-CodeCell").filter(has=page.locator(".jp-InputArea-editor", has_text="%%distributed"))
    monitor = cell.locator("[data-testid='nbtrain-monitor']").last
    monitor.wait_for(timeout=120_000)

    def ended() -> dict[str, Any] | None:
        seen: dict[str, Any] = monitor.evaluate(READ_MONITOR)
        return seen if seen["state"] in ("succeeded", "failed", "cancelled") and seen["points"] >= 5 else None

    final = _poll(ended, 300, "the Trainer run to end with its 5 logged losses charted")
    monitor.screenshot(path=str(artifacts / "trainer-succeeded.png"))
    assert final["state"] == "succeeded", final
    assert final["points"] == 5  # logging_steps=2 of max_steps=10: steps 2, 4, 6, 8, 10
    assert re.search(r"\b10\s*/\s*10\b", final["step"]), final  # progress against max_steps
    # the charted points are the Trainer's logged ones: the run's own record (its event files) holds the losses at
    # steps 2..10, and the chart's title shows the last of them (4 significant digits)
    from nbtrain.client.api import runs
    from nbtrain.store import Store

    [run] = [r for r in runs(store=Store(lab.home)) if r.spec.name == "hf-browser"]  # the lab is shared
    losses = run.metrics()["loss"]
    assert [step for step, _ in losses] == [2, 4, 6, 8, 10], losses
    latest = re.fullmatch(r"(\S+) at step (\d+)", final["latest"])
    assert latest, final
    assert (float(latest[1]), int(latest[2])) == (float(f"{losses[-1][1]:.4g}"), 10), (final, losses)
    _poll(lambda: not survivors(), 30, "no gang process left")
