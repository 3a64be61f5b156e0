"""The demo notebook executed headless with nbclient ends with a succeeded run and its accuracy."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_quickstart_runs_headless(home: Path, tmp_path: Path) -> None:
    notebook = nbformat.read(EXAMPLES / "quickstart.ipynb", as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "".join(o.get("text", "") for o in notebook.cells[-1].outputs if o.get("output_type") == "stream")
    assert "succeeded" in text, text
    accuracy = float(re.search(r"final test accuracy: ([0-9.]+)", text).group(1))  # type: ignore[union-attr]
    assert accuracy > 0.85, text
    assert "world size 4" in text
    # the monitor under the %%distributed cell keeps a readable final summary for headless runs
    (distributed_cell,) = [c for c in notebook.cells if c.source.startswith("%%distributed")]
    (shown,) = [o for o in distributed_cell.outputs if o.get("output_type") == "display_data"]
    assert "application/vnd.jupyter.widget-view+json" in shown["data"]
    summary = shown["data"]["text/plain"]
    assert "succeeded" in summary and "world size 4" in summary and "test_accuracy=" in summary
    from nbtrain.store import Store

    (record,) = Store(home).records()
    assert record.state == "succeeded" and record.spec.nodes == 2 and record.spec.procs == 2
