"""Slurm's own verdicts, on a real 2-node cluster: a held job shows its reason, an impossible request is refused
before submission with Slurm's reason, a time limit and a dead node end the run with a clear verdict."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from cluster import Cluster

from nbtrain.backends.slurm import SlurmBackend
from nbtrain.backends.slurm.backend import job_leftovers
from nbtrain.bundle import capture_cell
from nbtrain.client import submit_bundle
from nbtrain.errors import SpecError
from nbtrain.model import RunState
from nbtrain.spec import JobSpec
from nbtrain.store import Store, read_json

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SLEEP_CELL = 'import time\nprint("ready", flush=True)\nfor _ in range(3000):\n    time.sleep(0.1)\n'


def _submit(home: Path, source: str, **spec: object):  # type: ignore[no-untyped-def]
    store = Store(home)
    backend = SlurmBackend(store)
    full = JobSpec(**{"backend": "slurm", "device": "cpu", "nodes": 2, "procs_per_node": 1, **spec})  # type: ignore[arg-type]
    return submit_bundle(capture_cell(source, {"__name__": "__main__"}), full, store=store, backend=backend), backend


def _wait_line(run, text: str, timeout: float = 90) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while text not in run.logs(0).splitlines():
        assert time.monotonic() < deadline, f"run {run.id} never printed {text!r}"
        time.sleep(0.2)


def test_a_queued_run_shows_slurms_reason_and_its_position(home: Path, slurm_cluster: Cluster) -> None:
    run, _backend = _submit(home, "1\n", partition="down", nodes=1)
    try:
        deadline = time.monotonic() + 20
        while "PartitionDown" not in run.snapshot(refresh=True).detail:
            assert time.monotonic() < deadline, f"Slurm's reason never showed: {run.snapshot().detail!r}"
            time.sleep(0.3)
        assert run.status() is RunState.QUEUED
        # where the user looks: the summary (and the monitor's text form), the wire row of REST / --json / the panel
        assert "  now: queued: PartitionDown (position 1" in run.summary(), run.summary()
        row = run.snapshot().summary()
        assert row.state == "queued" and (row.detail or "").startswith("queued: PartitionDown (position 1"), row
    finally:
        run.cancel()
    assert run.status() is RunState.CANCELLED
    assert run.snapshot().summary().detail is None  # an ended run says nothing of what it is doing


@pytest.mark.parametrize(("spec", "said"), [
    ({"nodes": 3}, "Requested node configuration is not available"),
    ({"partition": "nope"}, "Invalid partition name specified"),
    ({"device": "gpu", "nodes": 1}, "Requested node configuration is not available"),
])
def test_an_impossible_request_is_refused_before_submission_with_slurms_reason(
        home: Path, slurm_cluster: Cluster, spec: dict[str, object], said: str) -> None:
    with pytest.raises(SpecError) as caught:
        _submit(home, "1\n", **spec)
    assert said in str(caught.value) and "--backend slurm" in str(caught.value), caught.value
    assert slurm_cluster.client("squeue", "-h").stdout.strip() == "", "a refused request reached the queue"
    assert not (home / "runs").is_dir() or not any((home / "runs").iterdir()), "a refused request left a run"


def _job_id(home: Path, run_id: str) -> str:
    return str(read_json(Store(home).attempt_dir(run_id, 0) / "slurm.json")["job_id"])


def _wait_gone(what: str, find, timeout: float = 15) -> None:  # type: ignore[no-untyped-def]
    """Wait until ``find()`` (live PIDs or queue lines) is empty: Slurm's clean-up after a verdict is asynchronous."""
    deadline = time.monotonic() + timeout
    while (left := find()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"{what} still there {timeout:.0f} s after the verdict: {left}"


def test_a_dead_node_fails_the_run_and_leaves_nothing(home: Path, slurm_cluster: Cluster) -> None:
    run, _ = _submit(home, SLEEP_CELL)
    _wait_line(run, "ready")
    job_id = _job_id(home, run.id)
    slurm_cluster.kill_node("n2")
    assert run.wait(timeout=120, raise_on_failure=False, progress=False) is RunState.FAILED
    failure = run.failure
    assert failure is not None, "a failed run without a failure"
    # the verdict names n2 (node 1: rank 1, one process per node), never n1, the survivor
    said = failure.summary()
    if failure.node is not None or failure.rank is not None:
        assert (failure.node, failure.rank) == (1, 1), f"blames node {failure.node} rank {failure.rank}: {said}"
    assert re.search(r"\bn2\b", said) and not re.search(r"\bn1\b|n\[", said), f"names no dead node: {said}"
    # nothing of the run is left: no process of its job on this machine, no job in the queue
    _wait_gone(f"processes of job {job_id}", lambda: job_leftovers(job_id, run.id))
    _wait_gone("job processes of the cluster", slurm_cluster.job_processes)
    _wait_gone("jobs in squeue", lambda: slurm_cluster.client("squeue", "-h", "-o", "%i %T").stdout.split())


def test_the_time_limit_ends_the_run_with_a_timeout_verdict(home: Path, slurm_cluster: Cluster) -> None:
    # Slurm's smallest limit is one minute, enforced about every 30 s
    run, _ = _submit(home, SLEEP_CELL, time_limit="1")
    assert run.wait(timeout=200, raise_on_failure=False, progress=False) is RunState.FAILED
    failure = run.failure
    assert failure is not None and "TIMEOUT" in failure.reason and "--time" in failure.reason, failure
