"""State from Slurm without polling storms: the status of any number of runs, asked within
:data:`~nbtrain.backends.slurm.cli.JOB_CACHE_S`, costs one ``scontrol show job -o`` (the real one, counted at
:func:`nbtrain.backends.slurm.cli.run`, the module's only door to Slurm's commands)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from cluster import Cluster

from nbtrain.backends.base import RunHandle
from nbtrain.backends.slurm import SlurmBackend, cli
from nbtrain.bundle import capture_cell
from nbtrain.client import submit_bundle
from nbtrain.model import RunState
from nbtrain.spec import JobSpec
from nbtrain.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

RUNS = 4


def test_the_status_of_many_runs_within_a_second_costs_one_scontrol_call(
        home: Path, slurm_cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(home)
    backend = SlurmBackend(store)
    spec = JobSpec(backend="slurm", device="cpu", nodes=1, procs_per_node=1, partition="down")  # held: no processes
    runs = [submit_bundle(capture_cell("1\n", {"__name__": "__main__"}), spec, store=store, backend=backend)
            for _ in range(RUNS)]
    handles = [RunHandle("slurm", run.id, store.load(run.id).handle) for run in runs]
    queries: list[float] = []
    real = cli.run

    def counted(argv: list[str], **options: object) -> object:
        if argv[:3] == ["scontrol", "show", "job"]:
            queries.append(time.monotonic())
        return real(argv, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(cli, "run", counted)
    try:
        with cli._lock:  # no query in flight (a run's watcher thread asks too): the next one is counted
            cli._cache = None
            queries.clear()
        statuses = [backend.status(handle) for _ in range(5) for handle in handles]
        elapsed = time.monotonic() - queries[0]
        assert elapsed < cli.JOB_CACHE_S, f"{len(statuses)} status calls took {elapsed:.2f} s: the test cannot tell"
        assert [s.state for s in statuses] == [RunState.QUEUED] * len(statuses), statuses
        assert len(queries) == 1, f"{len(statuses)} status calls of {RUNS} runs cost {len(queries)} scontrol calls"
        time.sleep(cli.JOB_CACHE_S - (time.monotonic() - queries[0]) + 0.05)
        backend.status(handles[0])
        assert len(queries) == 2, "a status after the cache's second did not ask Slurm again"
    finally:
        for run in runs:
            run.cancel()
