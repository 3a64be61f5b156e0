"""Regenerate the built-in templates' example notebooks (examples/templates/NAME.ipynb) from the cells below.

Every notebook runs on a CPU-only machine in well under a minute (scikit-learn's bundled digits, no download):
it picks its profile with ``--profile NAME`` and overrides the GPU-sized shape with a tiny one (``--nodes``,
``--gpus``), which the profile allows because it does not lock them. ``python examples/templates/make_templates.py``
rewrites them; tests/integration/test_template_notebooks.py executes each headless.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

SETUP = """import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import Accelerator
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

import nbtrain

SEED = 0


def make_datasets(seed: int = SEED):
    \"\"\"Digit images scaled to [0, 1], split 80/20, as tensors (the same split on every rank).\"\"\"
    digits = load_digits()
    x = digits.data.astype(np.float32) / 16.0
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(0.8 * len(x))
    train, test = order[:cut], order[cut:]
    return (TensorDataset(torch.from_numpy(x[train]), torch.from_numpy(y[train])),
            TensorDataset(torch.from_numpy(x[test]), torch.from_numpy(y[test])))


class DigitNet(nn.Module):
    \"\"\"A two-layer perceptron: 64 pixels -> hidden -> 10 classes.\"\"\"

    def __init__(self, hidden: int = 64):
        super().__init__()
        self.fc1 = nn.Linear(64, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))"""

TRAIN_LOOP = """accelerator = Accelerator()
torch.manual_seed(SEED)
train_set, test_set = make_datasets()
model = DigitNet(HIDDEN)
optimizer = torch.optim.Adam(model.parameters(), lr=LR)
train_loader = DataLoader(train_set, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(SEED))
test_loader = DataLoader(test_set, batch_size=256)
model, optimizer, train_loader, test_loader = accelerator.prepare(model, optimizer, train_loader, test_loader)
start = nbtrain.restore(accelerator)          # 0 on a fresh run; the saved step + 1 after a restart
step = 0
for epoch in range(EPOCHS):
    model.train()
    for x, y in train_loader:
        step += 1
        if step < start:
            continue
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
        accelerator.log({"loss": accelerator.reduce(loss.detach(), "mean").item()}, step=step)
    nbtrain.save_checkpoint(accelerator, step)   # every rank, once per epoch
model.eval()
correct = total = 0
with torch.no_grad():
    for x, y in test_loader:
        predictions = accelerator.gather_for_metrics(model(x).argmax(dim=1))
        labels = accelerator.gather_for_metrics(y)
        correct += (predictions == labels).sum().item()
        total += labels.numel()
accuracy = correct / total
accelerator.log({"test_accuracy": accuracy}, step=step)
accelerator.print(f"world size {accelerator.num_processes}: test accuracy {accuracy:.3f}")
accelerator.end_training()
accuracy"""

WAIT = """run.wait()
print(f"final test accuracy: {run.result():.3f}")
print(run.summary())"""


def _title(name: str, what: str, cpu: str) -> str:
    return (f"# Template `{name}`: {what}\n\n"
            f"`nbtrain templates show {name}` prints the profile: its options, the ones it locks, and how it sizes "
            f"resources, logs, checkpoints and retries (docs/templates.md). {cpu}")


NOTEBOOKS: dict[str, list[tuple[str, str]]] = {
    "single-node-gpu": [
        ("markdown", _title("single-node-gpu", "one node, its GPUs, DDP",
                            "On a machine without GPUs `--gpus 2` runs two CPU processes (gloo) instead of the "
                            "profile's 4 GPUs; everything else is the profile's.")),
        ("code", "%load_ext nbtrain"),
        ("code", "%nbtrain templates show single-node-gpu"),
        ("code", SETUP),
        ("code", "HIDDEN = 64\nEPOCHS = 2\nLR = 3e-3"),
        ("code", "%%distributed --profile single-node-gpu --gpus 2 --name single --out run\n" + TRAIN_LOOP),
        ("code", WAIT),
    ],
    "multinode-ddp": [
        ("markdown", _title("multinode-ddp", "several nodes, DDP, restarts from checkpoints",
                            "It locks `--strategy ddp`: passing `--strategy fsdp` is refused before anything "
                            "starts (the cell below shows the message). Here 2 nodes x 1 CPU process stand in "
                            "for 2 x 8 GPUs.")),
        ("code", "%load_ext nbtrain"),
        ("code", SETUP),
        ("code", "HIDDEN = 64\nEPOCHS = 2\nLR = 3e-3"),
        ("code", "%%distributed --profile multinode-ddp --nodes 2 --gpus 1 --dry-run\n"
                 "# --dry-run: the plan, and where each value came from (profile, flag, default)\n" + TRAIN_LOOP),
        ("code", "from IPython.core.error import UsageError\n\n"
                 "try:  # the profile locks the strategy: a different one is refused, nothing starts\n"
                 "    get_ipython().run_cell_magic(\"distributed\", \"--profile multinode-ddp --strategy fsdp\", \"pass\")\n"
                 "except UsageError as error:\n"
                 "    print(\"refused:\", error)"),
        ("code", "%%distributed --profile multinode-ddp --nodes 2 --gpus 1 --name multinode --out run\n" + TRAIN_LOOP),
        ("code", WAIT),
    ],
    "large-model-fsdp": [
        ("markdown", _title("large-model-fsdp", "a model sharded with FSDP 2",
                            "The profile targets GPUs (FSDP 2, bf16, 2 x 8 GPUs), and FSDP needs them: on CPU "
                            "Accelerate either fails on every rank (FSDP 1) or silently trains plain DDP under the "
                            "FSDP label (FSDP 2), so nbtrain refuses `--strategy fsdp` without GPUs, before "
                            "anything starts; DeepSpeed likewise. The first cell shows that refusal on a CPU "
                            "machine; the second runs the same training cell with the profile's restart and "
                            "checkpoint policy as DDP on 2 CPU processes (`--strategy ddp`, which the profile "
                            "does not lock; on CPU nbtrain runs without mixed precision). On a GPU machine drop "
                            "that override.")),
        ("code", "%load_ext nbtrain"),
        ("code", SETUP),
        ("code", "HIDDEN = 256\nEPOCHS = 2\nLR = 3e-3"),
        ("code", "import torch\nfrom IPython.core.error import UsageError\n\n"
                 "if not torch.cuda.is_available():  # what the profile does on CPU: refused, nothing starts\n"
                 "    try:\n"
                 "        get_ipython().run_cell_magic(\n"
                 "            \"distributed\", \"--profile large-model-fsdp --nodes 1 --gpus 2\", "
                 "\"pass\")\n"
                 "    except UsageError as error:\n"
                 "        print(\"refused:\", error)"),
        ("code", "%%distributed --profile large-model-fsdp --nodes 1 --gpus 2 --strategy ddp --name large --out run\n" + TRAIN_LOOP),
        ("code", WAIT),
    ],
    "distributed-eval": [
        ("markdown", _title("distributed-eval", "score a trained model on several ranks",
                            "The model is trained here in the kernel (one process, a few seconds); the "
                            "`%%distributed` cell ships its weights and each of 2 CPU processes scores its "
                            "shard of the test set; `gather_for_metrics` puts them together.")),
        ("code", "%load_ext nbtrain"),
        ("code", SETUP),
        ("code", "torch.manual_seed(SEED)\n"
                 "train_set, _ = make_datasets()\n"
                 "trained = DigitNet(64)\n"
                 "optimizer = torch.optim.Adam(trained.parameters(), lr=3e-3)\n"
                 "for epoch in range(3):\n"
                 "    for x, y in DataLoader(train_set, batch_size=64, shuffle=True):\n"
                 "        optimizer.zero_grad()\n"
                 "        F.cross_entropy(trained(x), y).backward()\n"
                 "        optimizer.step()\n"
                 "WEIGHTS = {k: v.detach().numpy().copy() for k, v in trained.state_dict().items()}"),
        ("code", "%%distributed --profile distributed-eval --gpus 2 --name evaluate --out run\n"
                 "accelerator = Accelerator()\n"
                 "_, test_set = make_datasets()\n"
                 "model = DigitNet(64)\n"
                 "model.load_state_dict({k: torch.from_numpy(v) for k, v in WEIGHTS.items()})\n"
                 "model, loader = accelerator.prepare(model, DataLoader(test_set, batch_size=100))\n"
                 "model.eval()\n"
                 "correct = total = 0\n"
                 "with torch.no_grad():\n"
                 "    for x, y in loader:\n"
                 "        predictions = accelerator.gather_for_metrics(model(x).argmax(dim=1))\n"
                 "        labels = accelerator.gather_for_metrics(y)\n"
                 "        correct += (predictions == labels).sum().item()\n"
                 "        total += labels.numel()\n"
                 "accelerator.log({\"eval_accuracy\": correct / total})\n"
                 "accelerator.print(f\"world size {accelerator.num_processes}: scored {total} images\")\n"
                 "correct / total"),
        ("code", WAIT),
    ],
    "param-sweep": [
        ("markdown", _title("param-sweep", "N runs from a grid, compared side by side",
                            "Each point of the grid is its own run (1 process here), all in the MLflow experiment "
                            "`sweeps` with the grid's values as params: compare them in MLflow (select the runs, "
                            "Compare). The table at the end compares them without MLflow. From a terminal the "
                            "same sweep is a loop of `nbtrain submit DIR --profile param-sweep --param lr=…`.")),
        ("code", "%load_ext nbtrain"),
        ("code", SETUP),
        ("code", "HIDDEN = 64\nEPOCHS = 1\nGRID = [1e-3, 1e-2]"),
        ("code", "runs = {}\n"
                 "for LR in GRID:  # one run per point; LR ships to the workers as a literal (an MLflow param)\n"
                 "    get_ipython().run_cell_magic(\n"
                 "        \"distributed\", f\"--profile param-sweep --name lr-{LR:g} --no-monitor --out point\","
                 " TRAIN_CELL)\n"
                 "    runs[LR] = point"),
        ("code", "rows = []\n"
                 "for LR, point in runs.items():\n"
                 "    point.wait()\n"
                 "    rows.append((LR, point.result(), point.id))\n"
                 "print(\"lr        accuracy  run\")\n"
                 "for LR, accuracy, run_id in sorted(rows, key=lambda r: -r[1]):\n"
                 "    print(f\"{LR:<9g} {accuracy:.3f}     {run_id}\")\n"
                 "print(f\"{len(rows)} runs succeeded\")  # wait() raises for a failed run"),
    ],
    "preprocess-train": [
        ("markdown", _title("preprocess-train", "preprocess on every rank, then train",
                            "Each rank normalises its share of the images (`split_between_processes`), the shares "
                            "are gathered, a checkpoint marks the end of preprocessing, then the ranks train on "
                            "the result. 2 CPU processes stand in for the profile's 4 GPUs.")),
        ("code", "%load_ext nbtrain"),
        ("code", SETUP),
        ("code", "HIDDEN = 64\nEPOCHS = 2\nLR = 3e-3"),
        ("code", "%%distributed --profile preprocess-train --gpus 2 --name prep-train --out run\n"
                 "accelerator = Accelerator()\n"
                 "digits = load_digits()\n"
                 "# preprocessing: each rank standardises its share of the rows, then every rank gathers all of them\n"
                 "indices = list(range(len(digits.data)))\n"
                 "# (padded to equal shares: gather needs the same shape on every rank; the padding is cut after)\n"
                 "with accelerator.split_between_processes(indices, apply_padding=True) as mine:\n"
                 "    part = torch.from_numpy(digits.data[mine].astype(np.float32))\n"
                 "    part = (part - part.mean(dim=1, keepdim=True)) / (part.std(dim=1, keepdim=True) + 1e-6)\n"
                 "features = accelerator.gather(part)[: len(indices)]\n"
                 "labels = torch.from_numpy(digits.target.astype(np.int64))[: len(features)]\n"
                 "accelerator.log({\"preprocessed_rows\": len(features)}, step=0)\n"
                 "torch.manual_seed(SEED)\n"
                 "order = torch.randperm(len(features), generator=torch.Generator().manual_seed(SEED))\n"
                 "cut = int(0.8 * len(order))\n"
                 "train_set = TensorDataset(features[order[:cut]], labels[order[:cut]])\n"
                 "test_set = TensorDataset(features[order[cut:]], labels[order[cut:]])\n"
                 "model = DigitNet(HIDDEN)\n"
                 "optimizer = torch.optim.Adam(model.parameters(), lr=LR)\n"
                 "train_loader = DataLoader(train_set, batch_size=32, shuffle=True, "
                 "generator=torch.Generator().manual_seed(SEED))\n"
                 "test_loader = DataLoader(test_set, batch_size=256)\n"
                 "model, optimizer, train_loader, test_loader = accelerator.prepare(model, optimizer, train_loader, "
                 "test_loader)\n"
                 "nbtrain.save_checkpoint(accelerator, 0)   # preprocessing done\n"
                 "step = 0\n"
                 "for epoch in range(EPOCHS):\n"
                 "    model.train()\n"
                 "    for x, y in train_loader:\n"
                 "        step += 1\n"
                 "        loss = F.cross_entropy(model(x), y)\n"
                 "        optimizer.zero_grad()\n"
                 "        accelerator.backward(loss)\n"
                 "        optimizer.step()\n"
                 "        accelerator.log({\"loss\": accelerator.reduce(loss.detach(), \"mean\").item()}, step=step)\n"
                 "    nbtrain.save_checkpoint(accelerator, step)\n"
                 "model.eval()\n"
                 "correct = total = 0\n"
                 "with torch.no_grad():\n"
                 "    for x, y in test_loader:\n"
                 "        correct += (accelerator.gather_for_metrics(model(x).argmax(dim=1)) == "
                 "accelerator.gather_for_metrics(y)).sum().item()\n"
                 "        total += len(accelerator.gather_for_metrics(y))\n"
                 "accelerator.print(f\"world size {accelerator.num_processes}: test accuracy {correct / total:.3f}\")\n"
                 "accelerator.end_training()\n"
                 "correct / total"),
        ("code", WAIT),
    ],
}
# the sweep submits the training cell once per grid point (run_cell_magic with the cell's text)
NOTEBOOKS["param-sweep"].insert(3, ("code", f"TRAIN_CELL = {TRAIN_LOOP!r}"))


def main() -> None:
    here = Path(__file__).resolve().parent
    for name, cells in NOTEBOOKS.items():
        notebook = nbformat.v4.new_notebook()
        notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        notebook.cells = [nbformat.v4.new_markdown_cell(text) if kind == "markdown" else nbformat.v4.new_code_cell(text)
                          for kind, text in cells]
        for index, cell in enumerate(notebook.cells):
            cell["id"] = f"{name}-{index}"
        nbformat.write(notebook, here / f"{name}.ipynb")


if __name__ == "__main__":
    main()
