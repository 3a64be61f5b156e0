"""A Hugging Face ``Trainer`` in a 1x2 cell, unchanged: its logs are nbtrain metrics, its arguments MLflow params of
nbtrain's one MLflow run (``report_to="mlflow"`` opens no second one), and a rank killed after the first checkpoint
is restarted (``--max-restarts 1``) and the Trainer goes on from that checkpoint.

The model is a tiny BERT built from its config (no download); the data is made in the cell.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

pytest.importorskip("transformers")

from nbtrain.events import EventKind  # noqa: E402

DEFINITIONS = '''
import os, signal
import torch
from transformers import BertConfig, BertForSequenceClassification, TrainerCallback

class Tokens(torch.utils.data.Dataset):
    """64 sequences of 8 token ids; the label is the parity of the first token."""
    def __len__(self):
        return 64
    def __getitem__(self, i):
        ids = torch.randint(0, 50, (8,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "attention_mask": torch.ones(8, dtype=torch.long), "labels": int(ids[0]) % 2}

class KillRankZeroOnce(TrainerCallback):
    """Kills rank 0 at step 6 of the first attempt: after the checkpoint of step 4, before the log of step 6.
    Rank 0 prints the Trainer's global_step as training begins (0 on a fresh start, the checkpoint's on a resume)."""
    def on_train_begin(self, args, state, control, **kwargs):
        if os.environ.get("RANK") == "0":
            print(f"train begins at global_step {state.global_step}", flush=True)
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 6 and os.environ.get("NBTRAIN_ATTEMPT") == "0" and os.environ.get("RANK") == "0":
            os.kill(os.getpid(), signal.SIGKILL)
'''

CELL = '''%%distributed --nodes 1 --gpus 2 --name hf-trainer --out run --max-restarts 1
from transformers import Trainer, TrainingArguments
config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, vocab_size=50,
                    max_position_embeddings=16, num_labels=2)
args = TrainingArguments(output_dir="hf-out", max_steps=10, per_device_train_batch_size=4, logging_steps=2,
                         save_steps=4, learning_rate=1e-3, report_to="mlflow", disable_tqdm=True, seed=0)
trainer = Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=Tokens(),
                  callbacks=[KillRankZeroOnce()])
trainer.train()
'''


@pytest.fixture
def sqlite_tracking(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    for name in [k for k in os.environ if k.startswith("MLFLOW_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("NBTRAIN_TRACKING", "1")  # after `home`, which turns tracking off for other tests
    monkeypatch.chdir(tmp_path)
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_trainer_logs_params_one_mlflow_run_and_restart_from_its_checkpoint(sqlite_tracking: str, shell: Any,
                                                                            run_cell: Any, home: Path) -> None:
    from agentfiles import await_agent_exit, await_json  # tests/support
    from mlflow import MlflowClient

    run_cell(DEFINITIONS)
    run_cell(CELL)
    run = shell.user_ns["run"]
    assert run.wait(timeout=300, progress=False).value == "succeeded", run.summary()
    snap = run.snapshot()
    assert snap.attempt == 1  # rank 0 was killed once and the gang restarted
    # the Trainer's logs are nbtrain metrics at its global step: steps 2 and 4 from the first attempt, then the
    # restarted Trainer goes on from the checkpoint of step 4 (no step logged twice, none from 0 again)
    loss_steps = [int(step) for step, _ in run.metrics()["loss"]]
    assert loss_steps == [2, 4, 6, 8, 10]
    assert snap.total == 10  # max_steps drives the progress bar
    # a later attempt's point replaces an earlier one's at the same step in run.metrics(), so the steps each attempt
    # logged are read from the events: the restarted Trainer starts at global_step 4 and logs 6, 8, 10 only
    logged: dict[int, list[int]] = {}
    for event in run.backend.events(run.handle, follow=False):
        if event.kind is EventKind.METRIC and event.rank == 0 and "loss" in event.data.get("values", {}):
            logged.setdefault(event.attempt, []).append(int(event.data["step"]))
    assert logged == {0: [2, 4], 1: [6, 8, 10]}
    assert "train begins at global_step 0" in run.logs(0, attempt=0)
    assert "train begins at global_step 4" in run.logs(0, attempt=1)
    # the points are the Trainer's own logs: its log_history in the last checkpoint (step 4's entries carried over
    # from the checkpoint it resumed from) holds the same losses at the same steps
    last = max(run.checkpoints(), key=lambda c: c["step"])
    assert last["step"] == 10 and last["attempt"] == 1, run.checkpoints()
    state = json.loads((Path(last["path"]) / "trainer_state.json").read_text())
    assert state["global_step"] == 10
    trainer_losses = [(e["step"], e["loss"]) for e in state["log_history"] if "loss" in e]
    assert run.metrics()["loss"] == [(s, pytest.approx(v)) for s, v in trainer_losses]
    assert any("the Trainer resumes from the checkpoint of step 4" in n for n in snap.notices), snap.notices
    ledger = await_json(home / "runs" / run.id / "tracking.json", "finalized", {"attempt": 1, "state": "succeeded"})
    client = MlflowClient(tracking_uri=sqlite_tracking)
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    assert [r.info.run_id for r in runs] == [ledger["mlflow_run_id"]]  # report_to="mlflow" opened no second run
    [mlflow_run] = runs
    assert mlflow_run.data.params["learning_rate"] == "0.001"
    assert mlflow_run.data.params["max_steps"] == "10" and mlflow_run.data.params["hidden_size"] == "32"
    history = client.get_metric_history(mlflow_run.info.run_id, "loss")
    assert sorted((p.step, p.value) for p in history) == run.metrics()["loss"]  # each step once, same values
    assert any("transformers' MLflowCallback is not used" in n for n in snap.notices)
    await_agent_exit(run.id)
