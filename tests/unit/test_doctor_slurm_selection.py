"""When ``nbtrain doctor`` checks Slurm: asked (--backend slurm), or selected by NBTRAIN_BACKEND or ./nbtrain.toml;
which partition its store probe uses. The doctor selects a backend and its settings (``_doctor_selection``); the
Slurm backend's ``doctor_checks`` probes ``settings["partition"]``."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from nbtrain.cli import _doctor_selection


def _doctor_slurm_partition(args: argparse.Namespace) -> str | None:
    """None: no Slurm checks; else the partition the Slurm checks probe ("" = the default one)."""
    selected = _doctor_selection(args)
    if selected is None or selected[0] != "slurm":
        return None
    return str(selected[1].get("partition") or "")


def _args(backend: str | None = None, partition: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(backend=backend, partition=partition)


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("NBTRAIN_BACKEND", raising=False)
    monkeypatch.chdir(tmp_path)


def test_not_asked_and_not_selected_means_no_slurm_checks() -> None:
    assert _doctor_slurm_partition(_args()) is None
    assert _doctor_slurm_partition(_args("local")) is None


def test_asked_on_the_command_line() -> None:
    assert _doctor_slurm_partition(_args("slurm")) == ""
    assert _doctor_slurm_partition(_args("slurm", "gpu")) == "gpu"


def test_selected_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBTRAIN_BACKEND", "slurm")
    assert _doctor_slurm_partition(_args()) == ""
    assert _doctor_slurm_partition(_args("kubernetes")) is None  # the command line wins


def test_selected_by_nbtrain_toml_with_its_partition(tmp_path: Path) -> None:
    (tmp_path / "nbtrain.toml").write_text('[job]\nbackend = "slurm"\n\n[slurm]\npartition = "a100"\n')
    assert _doctor_slurm_partition(_args()) == "a100"
    assert _doctor_slurm_partition(_args(partition="debug")) == "debug"
    (tmp_path / "nbtrain.toml").write_text('[job]\nbackend = "local"\n')
    assert _doctor_slurm_partition(_args()) is None
    (tmp_path / "nbtrain.toml").write_text("not toml [")
    assert _doctor_slurm_partition(_args()) is None
