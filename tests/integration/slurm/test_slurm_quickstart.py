"""The quickstart's cells, with ``--backend slurm --nodes 2 --gpus 1``, run on the real 2-node cluster and reach the
accuracy the same flags reach on the local backend (on a CPU cluster ``--gpus 1`` is one CPU process per node)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest
from cluster import Cluster

from nbtrain.model import RunState

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

QUICKSTART = Path(__file__).resolve().parents[3] / "examples" / "quickstart.ipynb"
FLAGS = "%%distributed --nodes 2 --gpus 2"


def _accuracy(run_cell: Any, shell: Any, cells: list[Any], backend: str) -> tuple[float, Any]:
    first, _, body = cells[5].source.partition("\n")
    assert first.startswith(FLAGS) and "--backend" not in first
    run_cell(first.replace(FLAGS, f"%%distributed --backend {backend} --nodes 2 --gpus 1") + "\n" + body)
    run = shell.user_ns["run"]
    assert run.wait(timeout=300, progress=False) is RunState.SUCCEEDED, run.summary()
    return float(run.result()), run


def test_quickstart_on_slurm_reaches_the_local_accuracy(
    slurm_cluster: Cluster, run_cell: Any, shell: Any, home: Path,
) -> None:
    cells = nbformat.read(QUICKSTART, as_version=4).cells
    for cell in cells[2:5]:
        run_cell(cell.source)
    on_slurm, run = _accuracy(run_cell, shell, cells, "slurm")
    assert run.record.backend == "slurm" and run.record.spec.nodes == 2 and run.record.spec.procs == 1
    summary = run.summary()
    assert "on slurm: succeeded" in summary and "world size 2" in summary, summary
    assert f"test accuracy: {on_slurm:.3f}" in run.logs(0)
    assert [step for step, _ in run.metrics(1)["loss"]][:3] == [0, 1, 2]  # rank 1 ran on the second node
    local, _ = _accuracy(run_cell, shell, cells, "local")
    assert on_slurm > 0.85
    assert abs(on_slurm - local) <= 0.02, (on_slurm, local)  # same gang shape, same seed: the same training
