"""Shared helpers: plans of the Kubernetes backend for a small real bundle (no cluster, no API calls)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nbtrain.backends.base import Plan
from nbtrain.backends.kubernetes import KubeOptions, KubernetesBackend
from nbtrain.bundle import capture_cell
from nbtrain.spec import JobSpec
from nbtrain.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parent))

CELL = "from accelerate import Accelerator\naccelerator = Accelerator()\nSTEPS * 2\n"


@pytest.fixture(scope="session")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(directory, digest) of a small real bundle."""
    captured = capture_cell(CELL, {"__name__": "__main__", "STEPS": 3})
    directory = captured.write(tmp_path_factory.mktemp("bundles"))
    return str(directory), captured.digest


@pytest.fixture
def make_plan(bundle: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Plan]]:
    """``make_plan(run_id="r-abc", options=KubeOptions(...), **spec_fields)`` -> Plan (kubeconfig-free)."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))

    def make(run_id: str = "digits-3fa9c2", options: KubeOptions | None = None, **fields: Any) -> Plan:
        fields.setdefault("backend", "kubernetes")
        spec = JobSpec(**fields)
        backend = KubernetesBackend(Store(tmp_path / "home"), options=options or KubeOptions(image="ghcr.io/org/train:1"))
        return backend.plan(spec, bundle[0], bundle[1], run_id)

    yield make
