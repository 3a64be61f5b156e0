"""``--strategy deepspeed`` without DeepSpeed where the ranks run is refused before anything starts, naming the
extra; on Kubernetes the pod's preflight looks for it in the image. The probe is replaced at its seam
(:func:`nbtrain.backends.extras.importable`), so the rest of planning runs as it does for a user."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nbtrain.backends import extras
from nbtrain.backends.kubernetes import KubeOptions, KubernetesBackend
from nbtrain.backends.kubernetes import preflight as kube_preflight
from nbtrain.backends.local import LocalBackend
from nbtrain.backends.local import backend as local_backend
from nbtrain.backends.local.gpus import GpuInventory
from nbtrain.backends.slurm import SlurmBackend
from nbtrain.bundle import capture_cell
from nbtrain.errors import EnvironmentProblem
from nbtrain.spec import JobSpec
from nbtrain.store import Store

DEEPSPEED = JobSpec(procs_per_node=2, device="gpu", strategy="deepspeed")  # type: ignore[arg-type]


@pytest.fixture
def bundle(tmp_path: Path) -> tuple[str, str]:
    captured = capture_cell("1 + 1\n", {"__name__": "__main__"})
    return str(captured.write(tmp_path / "bundles")), captured.digest


@pytest.fixture
def probed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every (python, module) the probe is asked about; DeepSpeed is missing, everything else is there."""
    asked: list[tuple[str, str]] = []

    def importable(python: str, module: str) -> bool:
        asked.append((python, module))
        return module != "deepspeed"

    monkeypatch.setattr(extras, "importable", importable)
    monkeypatch.setattr(local_backend, "_accelerate_available", lambda python: True)
    return asked


def _local(tmp_path: Path) -> LocalBackend:
    gpus = GpuInventory(ids=("0", "1"), names=("fake",) * 2)
    return LocalBackend(Store(tmp_path / "home"), python="/envs/train/bin/python", gpus=gpus)


def test_local_deepspeed_without_the_extra_is_refused_naming_it(
        tmp_path: Path, bundle: tuple[str, str], probed: list[tuple[str, str]]) -> None:
    with pytest.raises(EnvironmentProblem) as caught:
        _local(tmp_path).plan(DEEPSPEED, bundle[0], bundle[1], "job-1")
    text = str(caught.value)
    assert "--strategy deepspeed: deepspeed is not installed for /envs/train/bin/python" in text
    assert "pip install 'nbtrain[deepspeed]'" in text
    assert ("/envs/train/bin/python", "deepspeed") in probed
    assert not (tmp_path / "home" / "runs").exists()  # nothing was written, nothing started


def test_ddp_and_fsdp_ask_for_no_extra(tmp_path: Path, bundle: tuple[str, str], probed: list[tuple[str, str]]) -> None:
    for strategy in ("ddp", "fsdp"):
        _local(tmp_path).plan(DEEPSPEED.with_changes(strategy=strategy), bundle[0], bundle[1], "job-1")
    assert not [m for _, m in probed if m == "deepspeed"]


def test_a_cpu_deepspeed_request_gets_the_gpu_refusal_first(
        tmp_path: Path, bundle: tuple[str, str], probed: list[tuple[str, str]]) -> None:
    from nbtrain.errors import SpecError

    with pytest.raises(SpecError, match="--strategy deepspeed needs GPUs"):
        _local(tmp_path).plan(DEEPSPEED.with_changes(device="cpu"), bundle[0], bundle[1], "job-1")


def test_slurm_checks_the_interpreter_its_nodes_share() -> None:
    slurm = SlurmBackend(Store(Path("/nonexistent")), python="/shared/venv/bin/python")
    assert slurm.ranks_python() == "/shared/venv/bin/python"


def test_kubernetes_leaves_it_to_the_pod_preflight_which_names_the_image(
        tmp_path: Path, bundle: tuple[str, str], probed: list[tuple[str, str]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    kube = KubernetesBackend(Store(tmp_path / "home"), options=KubeOptions(image="ghcr.io/org/train:1"))
    plan = kube.plan(DEEPSPEED, bundle[0], bundle[1], "job-1")  # this machine's packages do not matter
    assert not probed
    commands = [c["command"] for c in _containers(plan.request.to_json())]
    assert commands and all("deepspeed" in c[c.index("--need") + 1].split(",") for c in commands)
    ddp = kube.plan(DEEPSPEED.with_changes(strategy="ddp"), bundle[0], bundle[1], "job-2")
    assert all("deepspeed" not in c[c.index("--need") + 1] for c in (x["command"] for x in _containers(ddp.request.to_json())))
    line = kube_preflight.message(["deepspeed"], "ghcr.io/org/train:1")
    assert "the image ghcr.io/org/train:1 lacks the Python package deepspeed" in line


def test_the_real_probe_looks_into_another_interpreter() -> None:
    assert extras.importable(sys.executable, "json")
    assert not extras.importable(sys.executable, "no_such_module_nbtrain")
    assert not extras.importable("/nonexistent/python", "json")


def _containers(request: object) -> list[dict[str, list[str]]]:
    """Every container dict (one with a ``command`` and ``args``) anywhere in ``request``'s manifests."""
    found: list[dict[str, list[str]]] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "command" in node and "args" in node and "image" in node:
                found.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(request)
    return found
