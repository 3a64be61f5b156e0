"""A real 2-node Slurm cluster per test (slurmctld + two slurmd on this machine, see cluster.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster import Cluster, test_cluster


@pytest.fixture
def slurm_cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """A started cluster (partitions ``debug``, default, and ``down``, State=DOWN); stopped with zero leftovers."""
    with test_cluster(monkeypatch) as cluster:
        yield cluster
