"""`%nbtrain export` from a live kernel: the history's %%distributed cell, captured from the namespace."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError

SETUP = """import numpy as np
RATE = 0.25
NAME = "live"
table = np.arange(6).reshape(2, 3) * 2  # computed: the live path pickles it

def score(x):
    return float(x.sum()) * RATE
"""


def test_export_from_the_kernel(shell: Any, run_cell: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    run_cell(SETUP)
    run_cell("%%distributed --dry-run --name first --gpus 2\nprint('FIRST', score(table))")
    run_cell("%%distributed --dry-run --name second --nodes 2\nprint('SECOND', NAME, score(table))")
    capsys.readouterr()

    run_cell("%nbtrain export --params RATE,NAME,missing")
    out = capsys.readouterr().out
    job = tmp_path / "second-job"  # default: <run name>-job in the working directory
    assert f"to {job}" in out and "parameters: --RATE (float), --NAME (str)" in out
    assert "not parameters (the cell does not use them as plain values): missing" in out
    files = sorted(str(p.relative_to(job)) for p in job.rglob("*") if p.is_file() and p.parent == job)
    assert files == ["README.md", "accelerate-cpu.yaml", "accelerate.yaml", "job.sbatch", "manifest.json",
                     "nbtrain.toml", "objects.pkl", "requirements.txt", "train.py"]
    manifest = json.loads((job / "manifest.json").read_text())
    assert {c["name"]: c["kind"] for c in manifest["captured"]}["table"] == "pickle"
    assert any(p.startswith("cloudpickle==") for p in (job / "requirements.txt").read_text().splitlines())
    assert 'nodes = 2' in (job / "nbtrain.toml").read_text()

    ran = subprocess.run([sys.executable, "train.py", "--RATE", "1"], cwd=job, capture_output=True, text=True,
                         timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert "SECOND live 30.0" in ran.stdout

    run_cell(f"%nbtrain export --cell 2 --out {tmp_path / 'first'}")
    assert 'name = "first"' in (tmp_path / "first" / "nbtrain.toml").read_text()
    with pytest.raises(UsageError, match=r"In\[9\] is not a %%distributed cell; these are: In\[2\], In\[3\]"):
        run_cell("%nbtrain export --cell 9")


def test_parameters_from_the_notebook_file(shell: Any, run_cell: Any, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    notebook = tmp_path / "session.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("RATE = 0.25\nNAME = 'x'", metadata={"tags": ["parameters"]})]),
                   str(notebook))
    shell.user_ns["__session__"] = str(notebook)  # what JupyterLab's kernel sets
    run_cell("RATE = 0.5\nNAME = 'y'")
    run_cell("%%distributed --dry-run --name sess\nprint(RATE * 2, NAME)")
    capsys.readouterr()
    run_cell("%nbtrain export")
    out = capsys.readouterr().out
    job = tmp_path / "session-job"  # next to the notebook
    assert f"to {job}" in out and "parameters: --RATE (float), --NAME (str)" in out
    ran = subprocess.run([sys.executable, "train.py"], cwd=job, capture_output=True, text=True, timeout=60)
    assert "1.0 y" in ran.stdout, ran.stderr  # the kernel's current values are the defaults


def test_export_without_a_distributed_cell(shell: Any, run_cell: Any) -> None:
    run_cell("x = 1")
    with pytest.raises(UsageError, match="no %%distributed cell has run in this kernel yet"):
        run_cell("%nbtrain export")
