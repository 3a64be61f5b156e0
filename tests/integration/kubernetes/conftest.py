"""Fixtures for the Kubernetes backend against the fake API server (tests/integration/kubernetes/fake_*.py).

:func:`running_cluster` is also used by the contract suite (tests/contract/conftest.py loads this file by path),
so the fake cluster is set up the same way everywhere.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_cluster import NAMESPACE, FakeCluster


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def running_cluster(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCluster]:
    """A running fake cluster under ``workdir``; KUBECONFIG and NBTRAIN_K8S_* point nbtrain at it.

    CPU pods that run this interpreter. On exit: stops every mirror thread of this process, then ends
    every pod process.
    """
    fake = FakeCluster(workdir / "cluster")
    fake.__enter__()
    try:
        kubeconfig = fake.server.write_kubeconfig(workdir / "kubeconfig", namespace=NAMESPACE)
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        monkeypatch.setenv("NBTRAIN_K8S_IMAGE", "registry.example/train:py311")
        monkeypatch.setenv("NBTRAIN_K8S_PYTHON", sys.executable)
        monkeypatch.setenv("NBTRAIN_K8S_DEVICE", "cpu")
        monkeypatch.setenv("NBTRAIN_K8S_PORT", str(free_port()))
        monkeypatch.delenv("NBTRAIN_K8S_NAMESPACE", raising=False)
        monkeypatch.delenv("NBTRAIN_K8S_CONTEXT", raising=False)
        yield fake
    finally:
        from nbtrain.backends.kubernetes.backend import stop_mirrors

        stop_mirrors()
        fake.close()


@pytest.fixture
def cluster(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCluster]:
    """A running fake cluster (see :func:`running_cluster`) next to the isolated store."""
    with running_cluster(tmp_path, monkeypatch) as fake:
        yield fake


@pytest.fixture
def k8s_backend(cluster: FakeCluster, home: Path) -> Any:
    """A KubernetesBackend on the isolated store, configured from the environment set by ``cluster``."""
    from nbtrain.backends.kubernetes import KubernetesBackend
    from nbtrain.store import Store

    return KubernetesBackend(Store(home))
