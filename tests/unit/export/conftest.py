"""Fixtures for export tests: notebooks written to disk with nbformat, and running a job's train.py."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

Cell = str | tuple[str, list[str]]  # source, or (source, tags); "# md: ..." makes a markdown cell


def write_notebook(path: Path, cells: list[Cell]) -> Path:
    """Write ``cells`` as a notebook at ``path`` (ids are nbformat's random ones)."""
    nb_cells = []
    for cell in cells:
        source, tags = (cell, []) if isinstance(cell, str) else cell
        if source.startswith("# md:"):
            nb_cells.append(new_markdown_cell(source[5:].strip()))
        else:
            nb_cells.append(new_code_cell(source, metadata={"tags": tags} if tags else {}))
    nbformat.write(new_notebook(cells=nb_cells), str(path))
    return path


@pytest.fixture
def notebook_file(tmp_path: Path) -> Callable[..., Path]:
    """``notebook_file(cell, ...)`` -> path of a new .ipynb in a temporary directory."""

    def make(*cells: Cell, name: str = "nb.ipynb") -> Path:
        return write_notebook(tmp_path / name, list(cells))

    return make


def run_train(directory: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python train.py ARGS`` in ``directory`` (plain Python, no nbtrain runtime)."""
    full_env = {k: v for k, v in os.environ.items() if k != "NBTRAIN_PARAMS"}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "train.py", *args], cwd=directory, capture_output=True, text=True, env=full_env, timeout=60
    )


@pytest.fixture
def no_k8s(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the kubernetes backend unavailable, whatever this checkout holds."""
    from nbtrain.errors import SpecError

    def unavailable() -> object:
        raise SpecError("--backend kubernetes is not available: test stand-in")

    monkeypatch.setattr("nbtrain.export.manifests._backend", unavailable)
