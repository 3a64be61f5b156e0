"""A real 2-node Slurm cluster (slurmctld + two slurmd on this machine, see cluster.py), shared by the tests of a process.

``slurm_cluster`` lends the default cluster of :class:`cluster.SharedCluster` to one test at a time: every job is
cancelled after each test and a cluster the test changed (a killed node) is replaced. Tests that need their own
configuration start one with :func:`cluster.test_cluster`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster import SHARED, Cluster, shared_cluster_session


@pytest.fixture(scope="session")
def _slurm_shared() -> Iterator[None]:
    """Stops the process's shared cluster at the end of the session (failing on processes that outlived it)."""
    yield from shared_cluster_session()


@pytest.fixture
def slurm_cluster(_slurm_shared: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """The started shared cluster (partitions ``debug``, default, and ``down``, State=DOWN), no job in it."""
    with SHARED.lend(monkeypatch) as cluster:
        yield cluster
