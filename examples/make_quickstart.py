"""Regenerate quickstart.ipynb from the cell sources below (keeps the notebook reviewable in diffs)."""

from pathlib import Path

import nbformat

CELLS = [
    ("markdown", """# nbtrain quickstart: digits on a 2-node gang

This notebook trains a small network on scikit-learn's bundled handwritten **digits** as a distributed
Accelerate gang: 2 nodes x 2 processes. On a machine without GPUs the ranks run on CPU over gloo;
on a GPU machine `--gpus 2` means two GPUs per node. Nothing is downloaded."""),
    ("code", "%load_ext nbtrain"),
    ("code", """import nbtrain
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import Accelerator
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset"""),
    ("code", """# Hyper-parameters: plain values ship to the workers as literals.
HIDDEN = 64
EPOCHS = 6
BATCH_SIZE = 32
LR = 3e-3
SEED = 0"""),
    ("code", """def make_datasets(seed: int = SEED):
    \"\"\"Standardised 8x8 digit images split 80/20, as tensors (same split on every rank).\"\"\"
    digits = load_digits()
    x = digits.data.astype(np.float32) / 16.0
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(0.8 * len(x))
    train, test = order[:cut], order[cut:]
    return (TensorDataset(torch.from_numpy(x[train]), torch.from_numpy(y[train])),
            TensorDataset(torch.from_numpy(x[test]), torch.from_numpy(y[test])))


class DigitNet(nn.Module):
    \"\"\"A two-layer perceptron: 64 pixels -> HIDDEN -> 10 classes.\"\"\"

    def __init__(self, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(64, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))"""),
    ("code", """%%distributed --nodes 2 --gpus 2 --name digits --out run
accelerator = Accelerator()
torch.manual_seed(SEED)
train_set, test_set = make_datasets()
model = DigitNet(HIDDEN)
optimizer = torch.optim.Adam(model.parameters(), lr=LR)
train_loader = DataLoader(train_set, batch_size=BATCH_SIZE, shuffle=True,
                          generator=torch.Generator().manual_seed(SEED))
test_loader = DataLoader(test_set, batch_size=256)
model, optimizer, train_loader, test_loader = accelerator.prepare(model, optimizer, train_loader, test_loader)
accelerator.init_trackers("digits")

start = nbtrain.restore(accelerator)  # 0 on a fresh run; after a restart or run.resume(): the saved step + 1
step = 0
for epoch in range(EPOCHS):
    model.train()
    for x, y in train_loader:
        if step >= start:  # batches before the checkpoint are skipped, so the data order stays the same
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()
            global_loss = accelerator.reduce(loss.detach(), "mean").item()
            accelerator.log({"loss": global_loss, "epoch": epoch}, step=step)
        step += 1
    if step > start and nbtrain.checkpointing():  # checkpointing() is False on Kubernetes without --volume
        nbtrain.save_checkpoint(accelerator, step - 1)  # on every rank, at the end of each epoch it trained

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
accelerator.print(f"test accuracy: {accuracy:.3f} on {total} images")
accelerator.end_training()
accuracy"""),
    ("markdown", "The cell above returned at once; the kernel stayed free. Wait for the gang and read rank 0's result:"),
    ("code", """run.wait()
accuracy = run.result()
print(f"final test accuracy: {accuracy:.3f}")
print(run.summary())"""),
]


def build() -> nbformat.NotebookNode:
    """The quickstart notebook as an nbformat node (the hyper-parameter cell is tagged ``parameters``)."""
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    for index, (kind, source) in enumerate(CELLS):
        cell = nbformat.v4.new_markdown_cell(source) if kind == "markdown" else nbformat.v4.new_code_cell(source)
        cell["id"] = f"quickstart-{index}"
        if source.startswith("# Hyper-parameters"):
            cell.metadata["tags"] = ["parameters"]
        notebook.cells.append(cell)
    return notebook


if __name__ == "__main__":
    target = Path(__file__).with_name("quickstart.ipynb")
    nbformat.write(build(), target)
    print(f"wrote {target}")
