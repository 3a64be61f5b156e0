"""A store the nodes do not see, on a real cluster: the nodes' slurmd run in their own mount namespace where
``NBTRAIN_HOME`` is another (empty) directory at the same path, as on a cluster whose kernel machine keeps the store
on a local disk. The batch script's output (``supervisor.log`` in the attempt directory) cannot reach the kernel's
store: the run is FAILED saying the store does not look shared, naming NBTRAIN_HOME and the fix, and
``--max-restarts`` is not spent (one attempt, one job)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import Cluster
from cluster import test_cluster as start_cluster

from nbtrain.backends.slurm import SlurmBackend
from nbtrain.bundle import capture_cell
from nbtrain.client import submit_bundle
from nbtrain.model import RunState
from nbtrain.spec import JobSpec
from nbtrain.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _can_unshare() -> bool:
    import subprocess

    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True).returncode == 0


@pytest.fixture
def unshared(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """A 2-node cluster whose slurmds see an empty directory at ``home``'s path (bind-mounted in their namespace)."""
    if not _can_unshare():
        pytest.skip("needs `unshare -m` (a private mount namespace) to give the nodes their own NBTRAIN_HOME")
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    elsewhere = tmp_path / "the-nodes-nbtrain-home"
    elsewhere.mkdir()
    original = Cluster._daemon

    def daemon(self: Cluster, argv: list[str], log: str) -> Any:
        if argv[0] == "slurmd":  # exec keeps the pid: the cluster's stop() still finds and ends it
            argv = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                    'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh", str(elsewhere), str(home), *argv]
        return original(self, argv, log)

    monkeypatch.setattr(Cluster, "_daemon", daemon)
    with start_cluster(monkeypatch) as cluster:
        yield cluster


def test_a_store_the_nodes_cannot_see_fails_saying_so_without_spending_restarts(home: Path,
                                                                               unshared: Cluster) -> None:
    store = Store(home)
    spec = JobSpec(backend="slurm", device="cpu", nodes=1, procs_per_node=1, max_restarts=2)
    run = submit_bundle(capture_cell("1\n", {"__name__": "__main__"}), spec, store=store, backend=SlurmBackend(store))
    assert run.wait(timeout=120, raise_on_failure=False, progress=False) is RunState.FAILED, run.status()
    reason = run.failure.reason if run.failure else ""
    for words in ("does not look shared with the nodes", f"NBTRAIN_HOME={home} on this host",
                  "nbtrain doctor --backend slurm", "docs/slurm.md", "not restarted"):
        assert words in reason, (words, reason)
    assert [a["attempt"] for a in run.attempts()] == [0], run.attempts()  # the budget of 2 was not spent
    assert unshared.client("squeue", "-h").stdout.strip() == ""
