"""Every built-in template's example notebook executes headless (nbclient, this venv's kernel) on CPU and its run
succeeds with the shape the notebook asked for, the profile's other values applied."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from nbtrain.profiles import BUILTIN_DIR

pytestmark = pytest.mark.slow

TEMPLATES = Path(__file__).resolve().parents[2] / "examples" / "templates"
BUILTIN = sorted(p.stem for p in BUILTIN_DIR.glob("*.toml"))


def _stream(notebook: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for c in notebook.cells for o in c.get("outputs", [])
                   if o.get("output_type") == "stream")


def test_every_builtin_template_has_an_example_notebook() -> None:
    assert BUILTIN, BUILTIN_DIR
    assert sorted(p.stem for p in TEMPLATES.glob("*.ipynb")) == BUILTIN


@pytest.mark.parametrize("name", BUILTIN)
def test_template_notebook_runs_headless(name: str, home: Path, tmp_path: Path) -> None:
    notebook = nbformat.read(TEMPLATES / f"{name}.ipynb", as_version=4)
    NotebookClient(notebook, timeout=240, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = _stream(notebook)
    from nbtrain.store import Store

    records = Store(home).records()
    assert records and all(r.state == "succeeded" for r in records), text
    assert all(r.spec.name != "run" for r in records)  # the notebook's --name, i.e. its own cells ran
    if name == "param-sweep":
        assert len(records) == 2 and "2 runs succeeded" in text, text
        assert {r.spec.experiment for r in records} == {"sweeps"}  # the profile's experiment
    else:
        assert "final test accuracy" in text and "world size 2" in text, text
        (record,) = records
        assert record.spec.nodes * record.spec.procs == 2
    if name == "multinode-ddp":
        assert "refused:" in text and "locks strategy to ddp" in text, text
        assert "profile multinode-ddp 1.0, locked" in text, text  # the dry run's provenance
    if name == "large-model-fsdp":  # FSDP is refused on CPU (no GPU here); the cell runs as DDP, the policy kept
        assert "refused:" in text and "--strategy fsdp needs GPUs" in text, text
        assert records[0].spec.strategy.value == "ddp" and records[0].spec.max_restarts == 2
        assert records[0].spec.collective_timeout_s == 900
