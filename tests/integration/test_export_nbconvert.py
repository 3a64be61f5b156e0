"""`jupyter nbconvert --to nbtrain NOTEBOOK.ipynb` writes the job directory next to the notebook."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook


def _notebook(path: Path, *sources: str) -> Path:
    nbformat.write(new_notebook(cells=[new_code_cell(s) for s in sources]), str(path))
    return path


def _nbconvert(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_exporter_is_registered_for_the_menu() -> None:
    from nbconvert.exporters import get_export_names, get_exporter

    assert "nbtrain" in get_export_names()
    assert get_exporter("nbtrain").export_from_notebook == "nbtrain job"


def test_nbconvert_writes_the_job_directory(tmp_path: Path) -> None:
    _notebook(tmp_path / "train-me.ipynb", "%load_ext nbtrain", "WIDTH = 3",
              "def area(h):\n    return WIDTH * h", "%%distributed --nodes 1 --gpus 2 --name conv\nprint('AREA', area(4))")
    done = _nbconvert("--to", "nbtrain", "train-me.ipynb", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    job = tmp_path / "train-me-job"
    for name in ("train.py", "manifest.json", "nbtrain.toml", "requirements.txt", "README.md"):
        assert (job / name).is_file(), name
    assert (job / "k8s").is_dir()
    assert 'name = "conv"' in (job / "nbtrain.toml").read_text()
    ran = subprocess.run([sys.executable, "train.py"], cwd=job, capture_output=True, text=True, timeout=60)
    assert "AREA 12" in ran.stdout, ran.stderr

    from nbtrain.export.jobdir import load_job

    assert load_job(job).spec.name == "conv"  # nbtrain submit reads what nbconvert wrote


def test_nbconvert_options_and_refusal(tmp_path: Path) -> None:
    _notebook(tmp_path / "two.ipynb", "%%distributed --name a\nprint('a')", "%%distributed --name b\nprint('b')")
    done = _nbconvert("--to", "nbtrain", "--NbtrainExporter.cell=1", "two.ipynb", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert 'name = "a"' in (tmp_path / "two-job" / "nbtrain.toml").read_text()

    _notebook(tmp_path / "none.ipynb", "x = 1")
    refused = _nbconvert("--to", "nbtrain", "none.ipynb", cwd=tmp_path)
    assert refused.returncode != 0
    assert "the notebook has no %%distributed cell" in refused.stderr
    assert not (tmp_path / "none-job").exists()
