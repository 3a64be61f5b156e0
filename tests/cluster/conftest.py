"""The real-cluster suite is opt-in: say in pytest's header whether it runs, and why not."""

from __future__ import annotations

import os

import pytest


def pytest_report_header(config: pytest.Config) -> str:
    """One header line: where the suite runs, or the reason it is skipped."""
    kubeconfig = os.environ.get("NBTRAIN_TEST_KUBECONFIG")
    if kubeconfig:
        image = os.environ.get("NBTRAIN_TEST_IMAGE")
        pods = f"pods in {image}" if image else "dry runs only: set NBTRAIN_TEST_IMAGE to an image built from docker/Dockerfile"
        return f"nbtrain real-cluster suite (tests/cluster): against {kubeconfig} ({pods})"
    return ("nbtrain real-cluster suite (tests/cluster): skipped — set NBTRAIN_TEST_KUBECONFIG to a test cluster's "
            "kubeconfig to run it")
