"""``--warm`` shapes a warm gang cannot reproduce are refused while planning: before a gang, an agent or a run
directory exists, with the fix in the message (not as a WarmLaunchError inside a gang that already started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbtrain.backends.local import LocalBackend
from nbtrain.backends.local import backend as local_backend
from nbtrain.backends.local.gpus import GpuInventory
from nbtrain.bundle import capture_cell
from nbtrain.errors import SpecError
from nbtrain.spec import JobSpec
from nbtrain.store import Store


@pytest.fixture
def bundle(tmp_path: Path) -> tuple[str, str]:
    captured = capture_cell("1 + 1\n", {"__name__": "__main__"})
    return str(captured.write(tmp_path / "bundles")), captured.digest


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalBackend:
    monkeypatch.setattr(local_backend, "_accelerate_available", lambda python: True)
    return LocalBackend(Store(tmp_path / "home"), python="/envs/train/bin/python", gpus=GpuInventory(ids=(), names=()))


@pytest.mark.parametrize("shape", [{}, {"procs_per_node": 0}], ids=["default --nodes 1 --gpus 1", "--gpus 0"])
def test_a_single_process_warm_run_is_refused_before_anything_starts(
        tmp_path: Path, local: LocalBackend, bundle: tuple[str, str], shape: dict[str, int]) -> None:
    spec = JobSpec(warm=True, device="cpu", **shape)  # type: ignore[arg-type]
    assert spec.world_size == 1
    with pytest.raises(SpecError) as caught:
        local.plan(spec, bundle[0], bundle[1], "job-1")
    text = str(caught.value)
    assert "--warm needs more than one process" in text and "world size 1" in text
    assert "--gpus 2" in text and "drop --warm" in text
    assert not (tmp_path / "home" / "runs").exists()  # nothing was written, nothing started
    assert not (tmp_path / "home" / "gangs").exists()


@pytest.mark.parametrize("shape", [{"procs_per_node": 2}, {"nodes": 2}], ids=["--gpus 2", "--nodes 2 --gpus 1"])
def test_a_multi_process_warm_run_plans(local: LocalBackend, bundle: tuple[str, str], shape: dict[str, int]) -> None:
    plan = local.plan(JobSpec(warm=True, device="cpu", **shape), bundle[0], bundle[1], "job-1")  # type: ignore[arg-type]
    assert plan.request.warm is not None and plan.request.warm.ttl_s == plan.spec.warm_ttl_s
    assert all("--multi_gpu" in launcher.argv for launcher in plan.request.launchers)


def test_the_same_single_process_run_cold_plans(local: LocalBackend, bundle: tuple[str, str]) -> None:
    local.plan(JobSpec(device="cpu"), bundle[0], bundle[1], "job-1")  # type: ignore[arg-type]
