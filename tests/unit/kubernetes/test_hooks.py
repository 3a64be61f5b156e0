"""The Kubernetes backend's contract hooks: doctor_checks, check_export, close, and its typed request."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbtrain.backends.kubernetes import KubeOptions, KubernetesBackend
from nbtrain.backends.kubernetes.checks import PLACEHOLDER_IMAGE
from nbtrain.backends.kubernetes.request import KubernetesRequest
from nbtrain.bundle import capture_cell
from nbtrain.errors import SpecError
from nbtrain.spec import JobSpec
from nbtrain.store import Store

CELL = "from accelerate import Accelerator\naccelerator = Accelerator()\n"


def _backend(tmp_path: Path, image: str | None = "ghcr.io/org/train:1") -> KubernetesBackend:
    return KubernetesBackend(Store(tmp_path / "home"), options=KubeOptions(image=image))


def test_doctor_names_the_kubeconfig_it_would_use_or_says_there_is_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    (check,) = _backend(tmp_path).doctor_checks({})
    assert check.ok and "no kubeconfig" in check.detail and str(tmp_path / "missing") in check.detail
    config = tmp_path / "config"
    config.write_text("apiVersion: v1\n")
    monkeypatch.setenv("KUBECONFIG", str(config))
    (check,) = _backend(tmp_path).doctor_checks({})
    assert check.detail == f"kubeconfig {config}"


def test_check_export_counts_the_manifests_and_says_when_the_image_is_a_placeholder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    bundle = capture_cell(CELL, {"__name__": "__main__"})
    summary = _backend(tmp_path).check_export(JobSpec(backend="kubernetes", nodes=2, device="cpu"), bundle)
    assert summary is not None and summary.startswith("4 kubernetes object(s) (job)")
    other = _backend(tmp_path, image=None).check_export(JobSpec(backend="local", device="cpu"), bundle)
    assert other is not None and "with a placeholder image" in other
    assert PLACEHOLDER_IMAGE.startswith("registry.invalid/")


def test_check_export_refuses_a_kubernetes_job_without_an_image(tmp_path: Path) -> None:
    bundle = capture_cell(CELL, {"__name__": "__main__"})
    with pytest.raises(SpecError, match="--image: a kubernetes job needs a container image"):
        _backend(tmp_path, image=None).check_export(JobSpec(backend="kubernetes"), bundle)


def test_close_without_mirrors_returns_at_once(tmp_path: Path) -> None:
    _backend(tmp_path).close(timeout_s=0.1)


def test_the_request_survives_its_json_form(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    bundle = capture_cell(CELL, {"__name__": "__main__"})
    directory = bundle.write(tmp_path / "bundles")
    plan = _backend(tmp_path).plan(JobSpec(backend="kubernetes", device="cpu", queue="team-a"), str(directory),
                                   bundle.digest, "r-1")
    request = plan.request
    assert isinstance(request, KubernetesRequest)
    assert KubernetesRequest.from_json(request.to_json()) == request
    data = request.handle_data("uid-1")
    assert (data["kind"], data["name"], data["queue"], data["uid"]) == ("Job", request.name, "team-a", "uid-1")
