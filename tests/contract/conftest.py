"""The backends the contract suite runs on: one fixture each.

A backend joins the suite by declaring one fixture with ``@contract_backend("name")`` that yields a
:class:`helpers.BackendUnderTest` subclass; every test that asks for ``under_test`` then runs on it too.
For Slurm, e.g.::

    class SlurmUnderTest(BackendUnderTest):
        name = "slurm"                       # what it refuses comes from the options table (nbtrain.flags)
        gang_outlives_controller = True      # slurmctld owns the gang, not this process
        def kill_controller(self, run): ...  # what "the process following the run died" means there
        def footprint(self): ...             # jobs it submitted (scontrol), described
        def leftovers(self): ...             # jobs still queued or running (squeue), described
        def refusing_submits(self): ...      # sbatch refuses inside (an inactive partition)
        def on_store(self, store): ...

    @contract_backend("slurm")
    def slurm_under_test(home, slurm_cluster): yield SlurmUnderTest(Store(home), SlurmBackend(Store(home)))

Tests get the isolated store from the root ``home`` fixture (which also fails a test that leaves gang
processes behind). Every test here is marked ``slow``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import SUPERVISOR_MARKER, BackendUnderTest, pids_with_env, run_processes
from kubefixtures import kubernetes_fixtures  # tests/support, put on sys.path by tests/conftest.py

from nbtrain.client import Run
from nbtrain.spec import JobSpec
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

    def leftovers(self) -> list[str]:
        """Supervisors of this store, and processes of its runs' gangs."""
        gang = [f"run {run_id} pid {pid}" for run_id in self.store.ids() for pid in run_processes(run_id)]
        return sorted(set(self.footprint()) | set(gang))

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
        return writes + self.leftovers()

    def leftovers(self) -> list[str]:
        """The objects of runs the fake API server still holds (the claim every job mounts is the cluster's own)."""
        return [f"{kind} {obj['metadata']['name']}" for kind in RUN_KINDS for obj in self.cluster.store.items(kind)]

    @contextlib.contextmanager
    def refusing_submits(self) -> Iterator[str]:
        """The API server forbids creating ConfigMaps: the workload is created, its ConfigMap refused (403)."""
        denied = ("create", "configmaps")
        self.cluster.server.deny(*denied)
        try:
            yield "forbidden"
        finally:
            self.cluster.server.denied.discard(denied)

    def on_store(self, store: Store) -> KubernetesUnderTest:
        from nbtrain.backends.kubernetes import KubernetesBackend

        return KubernetesUnderTest(store, KubernetesBackend(store), self.cluster)


_kubernetes_fixtures = kubernetes_fixtures
# what a run creates on a cluster (every flavor's workload, and what it owns)
RUN_KINDS = ("jobs.batch", "pytorchjobs.kubeflow.org", "jobsets.jobset.x-k8s.io", "configmaps", "services", "secrets",
             "pods")
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
    gang_outlives_controller = False  # the supervisor is the batch script: Slurm ends the job when it dies

    # the events, log-page and cancel cases (runs by these names) put their two ranks on the cluster's two nodes,
    # one each: with the failing-rank case, the multi-node paths (srun across nodes, per-node logs, scancel on
    # both) are in the contract; the other cases stay on one node, where they are faster
    SPREAD_OVER_NODES = frozenset({"count", "paged", "cancelled"})

    def __init__(self, store: Store, backend: Any, cluster: Any) -> None:
        super().__init__(store, backend)
        self.cluster = cluster

    def spec(self, **overrides: Any) -> JobSpec:
        """The base spec, except that a two-rank run named in :attr:`SPREAD_OVER_NODES` gets one rank per node."""
        if overrides.get("name") in self.SPREAD_OVER_NODES and overrides.get("procs_per_node") == 2 \
                and "nodes" not in overrides:
            overrides = {**overrides, "nodes": 2, "procs_per_node": 1}
        return super().spec(**overrides)

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

    def leftovers(self) -> list[str]:
        """Jobs squeue still shows (pending, running, completing), read with squeue itself."""
        done = self.cluster.client("squeue", "--noheader", "--format=%i %T %j")
        assert done.returncode == 0, f"squeue failed: {done.stderr}"
        return [f"slurm job {line.strip()}" for line in done.stdout.splitlines() if line.strip()]

    @contextlib.contextmanager
    def refusing_submits(self) -> Iterator[str]:
        """Every partition that is up turns inactive: Slurm refuses the job ("Required partition not available").

        The Slurm backend asks ``sbatch --test-only`` while planning, so the refusal comes from ``plan`` there, not
        from ``submit``: what the test checks (the run left as it was) holds either way; the submit-time clean-up
        is exercised on Kubernetes.
        """
        shown = self.cluster.client("sinfo", "--noheader", "--format=%R %a").stdout.splitlines()
        partitions = [line.split()[0] for line in shown if line.split()[1:] == ["up"]]
        assert partitions, f"no partition is up: {shown}"
        for partition in partitions:
            self.cluster.client("scontrol", "update", f"PartitionName={partition}", "State=INACTIVE")
        try:
            yield "partition"
        finally:
            for partition in partitions:
                self.cluster.client("scontrol", "update", f"PartitionName={partition}", "State=UP")

    def on_store(self, store: Store) -> SlurmUnderTest:
        from nbtrain.backends.slurm import SlurmBackend

        return SlurmUnderTest(store, SlurmBackend(store), self.cluster)


def _slurm_cluster_module() -> Any:
    """tests/integration/slurm/cluster.py as a module, under the name its own conftest imports it by (``cluster``).

    One module object per process: the Slurm tests and this suite borrow the same :data:`cluster.SHARED` cluster.
    """
    name = "cluster"
    loaded = sys.modules.get(name)
    if loaded is not None:
        assert Path(str(loaded.__file__)).resolve() == SLURM_TESTS / "cluster.py", f"another module named {name}: {loaded}"
        return loaded
    spec = importlib.util.spec_from_file_location(name, SLURM_TESTS / "cluster.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def _slurm_shared() -> Iterator[None]:
    """Stops the process's shared Slurm cluster at the end of the session (failing on processes that outlived it)."""
    yield from _slurm_cluster_module().shared_cluster_session()


@contract_backend("slurm")
def slurm_under_test(home: Path, monkeypatch: pytest.MonkeyPatch, _slurm_shared: None) -> Iterator[SlurmUnderTest]:
    """The Slurm backend on the shared real 2-node cluster (skipped, with the install command, when Slurm is missing)."""
    from nbtrain.backends.slurm import SlurmBackend

    with _slurm_cluster_module().SHARED.lend(monkeypatch) as cluster:
        store = Store(home)
        subject = SlurmUnderTest(store, SlurmBackend(store), cluster)
        try:
            yield subject
        finally:
            subject.close()
