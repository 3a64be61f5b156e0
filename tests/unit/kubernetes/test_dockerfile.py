"""docker/Dockerfile: the image the docs point to and the real-cluster suite runs its pods in."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "docker" / "Dockerfile"


def _instructions() -> list[str]:
    return [line for line in DOCKERFILE.read_text().splitlines() if line and not line.startswith("#")]


def test_the_base_and_the_packages_are_pinned_and_the_user_is_not_root() -> None:
    lines = _instructions()
    base = next(line for line in lines if line.startswith("FROM "))
    assert re.fullmatch(r"FROM pytorch/pytorch:\d+\.\d+\.\d+-\S+-runtime", base), base
    pip = next(line for line in lines if "pip install" in line)
    assert re.search(r"\baccelerate==\d", pip) and re.search(r"\bcloudpickle==\d", pip), pip
    assert "nbtrain" not in pip  # the runtime travels in the ConfigMap
    user = [line for line in lines if line.startswith("USER ")]
    assert user and user[-1].split()[1].split(":")[0] not in {"0", "root"}


def test_the_docs_and_the_cluster_suite_name_the_file_and_its_build_command() -> None:
    build = "docker build -t nbtrain-pod:dev -f docker/Dockerfile docker"
    assert build in DOCKERFILE.read_text()
    assert "docker/Dockerfile" in (ROOT / "docs" / "kubernetes.md").read_text()
    assert build in (ROOT / "docs" / "kubernetes.md").read_text()
    assert build in (ROOT / "tests" / "cluster" / "test_real_cluster.py").read_text()
