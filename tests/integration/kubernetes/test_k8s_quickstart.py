"""The quickstart's %%distributed cell, unchanged, runs on Kubernetes (the fake API server) with the same result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest
from fake_cluster import NAMESPACE, FakeCluster

from nbtrain.model import RunState

pytestmark = pytest.mark.slow

QUICKSTART = Path(__file__).resolve().parents[3] / "examples" / "quickstart.ipynb"


def test_quickstart_cell_runs_unchanged_on_kubernetes(
    cluster: FakeCluster, run_cell: Any, shell: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NBTRAIN_BACKEND", "kubernetes")  # the config default: the cell itself names no backend
    cells = nbformat.read(QUICKSTART, as_version=4).cells
    assert cells[5].source.startswith("%%distributed --nodes 2 --gpus 2") and "--backend" not in cells[5].source
    for cell in cells[2:6]:
        run_cell(cell.source)
    run = shell.user_ns["run"]
    assert run.record.backend == "kubernetes"
    assert run.wait(timeout=240, progress=False) is RunState.SUCCEEDED
    accuracy = run.result()
    assert accuracy > 0.85
    summary = run.summary()
    assert "on kubernetes: succeeded" in summary and "world size 4" in summary
    assert f"test accuracy: {accuracy:.3f}" in run.logs(0)
    assert len(cluster.store.items("pods", NAMESPACE)) == 2  # 2 pods x 2 processes
    assert [step for step, _ in run.metrics(3)["loss"]][:3] == [0, 1, 2]
