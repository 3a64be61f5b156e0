"""The backends the contract suite runs on: one fixture each.

A backend joins the suite by declaring one fixture with ``@contract_backend("name")`` that yields a
:class:`helpers.BackendUnderTest` subclass; every test that asks for ``under_test`` then runs on it too.
For Slurm, e.g.::

    class SlurmUnderTest(BackendUnderTest):
        name = "slurm"
        refused = {...}                      # options it refuses, each with a non-default value
        gang_outlives_controller = True      # slurmctld owns the gang, not this process
        def kill_controller(self, run): ...  # what "the process following the run died" means there
        def footprint(self): ...             # jobs it submitted (squeue), described
        def on_store(self, store): ...

    @contract_backend("slurm")
    def slurm_under_test(home, slurm_cluster): yield SlurmUnderTest(Store(home), SlurmBackend(Store(home)))

Tests get the isolated store from the root ``home`` fixture (which also fails a test that leaves gang
processes behind). Every test here is marked ``slow``.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import SUPERVISOR_MARKER, BackendUnderTest, pids_with_env
from kubefixtures import kubernetes_fixtures  # tests/support, put on sys.path by tests/conftest.py

from nbtrain.client import Run
from nbtrain.store import Store, read_json

BACKENDS: list[str] = []  # names, in registration order


def contract_backend(name: str) -> Callable[[Callable[..., Any]], Any]:
    """Register a backend fixture for the suite; the fixture is named ``<name>_under_test``."""
    def register(fixture: Callable[..., Any]) -> Any:
        BACKENDS.append(name)
        return pytest.fixture(name=f"{name}_under_test")(fixture)
    return register


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that takes ``under_test`` runs once per registered backend."""
    if "under_test" in metafunc.fixturenames:
        metafunc.parametrize("under_test", BACKENDS, indirect=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The whole package is ``slow``: it starts real gangs."""
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def under_test(request: pytest.FixtureRequest) -> BackendUnderTest:
    """The backend this instance of the test runs on."""
    chosen: BackendUnderTest = request.getfixturevalue(f"{request.param}_under_test")
    return chosen


# -- local ------------------------------------------------------------------------------------------
class LocalUnderTest(BackendUnderTest):
    """Local processes under a detached supervisor per attempt: the supervisor controls the gang."""

    name = "local"
    refused: ClassVar[Mapping[str, Any]] = {"namespace": "x", "queue": "q", "image": "img:1",
                                            "shm_size": "1Gi", "priority_class": "high"}
    gang_outlives_controller = False

    def kill_controller(self, run: Run) -> None:
        """SIGKILL the supervisor of the run's latest attempt (its pid from status.json, else the record)."""
        attempts = sorted(int(p.name) for p in (self.store.run_dir(run.id) / "attempts").iterdir() if p.name.isdigit())
        pid = 0
        try:
            pid = int(read_json(self.store.attempt_dir(run.id, attempts[-1]) / "status.json").get("supervisor_pid") or 0)
        except (OSError, ValueError, IndexError):
            pass
        pid = pid or int(self.store.load(run.id).handle.get("supervisor_pid") or 0)
        assert pid, f"no supervisor pid for run {run.id} in status.json or its record"
        os.kill(pid, signal.SIGKILL)

    def footprint(self) -> list[str]:
        """Supervisors started for this store."""
        mine = {pid for pid in pids_with_env("NBTRAIN_HOME", {str(self.store.root)})}
        return [f"supervisor pid {pid}" for pid in pids_with_env(SUPERVISOR_MARKER) if pid in mine]

    def on_store(self, store: Store) -> LocalUnderTest:
        from nbtrain.backends.local import LocalBackend

        return LocalUnderTest(store, LocalBackend(store))


@contract_backend("local")
def local_under_test(home: Path) -> Iterator[LocalUnderTest]:
    """The embedded default backend on the isolated store."""
    from nbtrain.backends.local import LocalBackend

    store = Store(home)
    subject = LocalUnderTest(store, LocalBackend(store))
    yield subject
    subject.close()


# -- kubernetes ------------------------------------------------------------------------------------
class KubernetesUnderTest(BackendUnderTest):
    """Pods on the fake cluster; this process only mirrors the run (the cluster controls the gang).

    Every job mounts the claim :data:`CONTRACT_CLAIM` at :data:`CONTRACT_MOUNT` (a host directory of the fake), so
    checkpoints, ``--max-restarts`` and resume are honoured, as they are on a cluster with such a volume.
    """

    name = "kubernetes"
    refused: ClassVar[Mapping[str, Any]] = {"warm": True, "oversubscribe": True}
    gang_outlives_controller = True

    def __init__(self, store: Store, backend: Any, cluster: Any) -> None:
        super().__init__(store, backend, volumes=(f"{CONTRACT_CLAIM}:{CONTRACT_MOUNT}",))
        self.cluster = cluster

    def kill_controller(self, run: Run) -> None:
        """Stop this process's mirror threads, as if the watching kernel died."""
        from nbtrain.backends.kubernetes.backend import stop_mirrors

        stop_mirrors()

    def footprint(self) -> list[str]:
        """Write requests the fake API server received, and the objects it holds."""
        writes = [f"{verb} {resource}" for verb, _, resource, _ in self.cluster.server.requests
                  if verb in ("create", "update", "patch", "delete")]
        held = [f"{kind} {obj['metadata']['name']}" for kind in ("jobs.batch", "configmaps", "services", "pods")
                for obj in self.cluster.store.items(kind)]
        return writes + held

    def on_store(self, store: Store) -> KubernetesUnderTest:
        from nbtrain.backends.kubernetes import KubernetesBackend

        return KubernetesUnderTest(store, KubernetesBackend(store), self.cluster)


_kubernetes_fixtures = kubernetes_fixtures
CONTRACT_CLAIM = "nbtrain-contract"
CONTRACT_MOUNT = "/data"


@contract_backend("kubernetes")
def kubernetes_under_test(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubernetesUnderTest]:
    """The Kubernetes backend against the fake API server, whose pods run as local processes."""
    pytest.importorskip("kubernetes", reason="the kubernetes client is not installed")
    from nbtrain.backends.kubernetes import KubernetesBackend

    with _kubernetes_fixtures().running_cluster(tmp_path, monkeypatch) as cluster:
        cluster.add_claim(_kubernetes_fixtures().NAMESPACE, CONTRACT_CLAIM)
        store = Store(home)
        subject = KubernetesUnderTest(store, KubernetesBackend(store), cluster)
        try:
            yield subject
        finally:
            subject.close()


# -- slurm -----------------------------------------------------------------------------------------
SLURM_TESTS = Path(__file__).resolve().parents[1] / "integration" / "slurm"


class SlurmUnderTest(BackendUnderTest):
    """Batch jobs on a real 2-node Slurm cluster of this machine; the nbtrain supervisor runs inside each job."""

    name = "slurm"
    refused: ClassVar[Mapping[str, Any]] = {"image": "img:1", "namespace": "x", "oversubscribe": True, "warm": True,
                                            "shm_size": "1Gi", "priority_class": "high"}
    gang_outlives_controller = False  # the supervisor is the batch script: Slurm ends the job when it dies

    def kill_controller(self, run: Run) -> None:
        """SIGKILL the supervisor (the batch script's process) of the run's latest attempt."""
        attempts = sorted(int(p.name) for p in (self.store.run_dir(run.id) / "attempts").iterdir() if p.name.isdigit())
        pid = int(read_json(self.store.attempt_dir(run.id, attempts[-1]) / "status.json").get("supervisor_pid") or 0)
        assert pid, f"no supervisor pid for run {run.id} in status.json"
        os.kill(pid, signal.SIGKILL)

    def footprint(self) -> list[str]:
        """Jobs slurmctld knows (running or finished)."""
        from nbtrain.backends.slurm import cli

        return [f"slurm job {job_id} {job.state}" for job_id, job in cli.jobs(fresh=True).items()]

    def on_store(self, store: Store) -> SlurmUnderTest:
        from nbtrain.backends.slurm import SlurmBackend

        return SlurmUnderTest(store, SlurmBackend(store))


def _slurm_cluster_module() -> Any:
    """tests/integration/slurm/cluster.py as a module (its ``test_cluster`` starts a real 2-node cluster)."""
    name = "nbtrain_contract_slurm_cluster"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SLURM_TESTS / "cluster.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@contract_backend("slurm")
def slurm_under_test(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmUnderTest]:
    """The Slurm backend on a real 2-node cluster (skipped, with the install command, when Slurm is missing)."""
    from nbtrain.backends.slurm import SlurmBackend

    with _slurm_cluster_module().test_cluster(monkeypatch):
        store = Store(home)
        subject = SlurmUnderTest(store, SlurmBackend(store))
        try:
            yield subject
        finally:
            subject.close()
