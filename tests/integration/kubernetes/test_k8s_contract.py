"""The Backend contract (nbtrain/backends/base.py), checked on the Kubernetes backend one method at a time."""

from __future__ import annotations

from typing import Any

import pytest
from fake_cluster import FakeCluster

from nbtrain.backends.base import RunHandle
from nbtrain.bundle import capture_cell
from nbtrain.client import submit_bundle
from nbtrain.events import EventKind
from nbtrain.model import RunState
from nbtrain.spec import JobSpec

pytestmark = pytest.mark.slow


def test_backend_contract(cluster: FakeCluster, k8s_backend: Any) -> None:
    backend = k8s_backend
    assert backend.status(RunHandle("kubernetes", "never-submitted", {})).state is RunState.PENDING
    assert backend.logs(RunHandle("kubernetes", "never-submitted", {}), 0) == []
    bundle = capture_cell("for i in range(5):\n    print(f'line {i}', flush=True)\n'done'\n", {"__name__": "__main__"})
    first = submit_bundle(bundle, JobSpec(name="first", backend="kubernetes", device="cpu"), store=backend.store,
                          backend=backend)
    run = submit_bundle(bundle, JobSpec(name="second", backend="kubernetes", device="cpu"), store=backend.store,
                        backend=backend)
    events = list(backend.events(run.handle, follow=True, poll_s=0.05))  # follows until terminal, then stops
    assert backend.status(run.handle).state is RunState.SUCCEEDED
    assert len({e.key for e in events}) == len(events)  # each exactly once
    assert [e.kind for e in events if e.source == "kubernetes"][-1] is EventKind.STATE
    assert {e.kind for e in events} >= {EventKind.RANK_START, EventKind.RESULT, EventKind.RANK_DONE}
    again = list(backend.events(run.handle))
    assert sorted(e.key for e in again) == sorted(e.key for e in events)
    cursor = backend.cursor(run.handle)
    batch = cursor.poll()
    assert [line.text for line in batch.lines if line.rank == 0 and line.text.startswith("line")] == [
        f"line {i}" for i in range(5)]
    assert cursor.poll().events == () and cursor.poll().lines == ()  # the cursor keeps its position
    assert backend.logs(run.handle, 0, tail=1) == ["line 4"]
    assert backend.logs(run.handle, 7) == []  # a rank that does not exist (yet): no lines
    deletes = len(cluster.server.deletes)
    backend.cancel(run.handle)  # cancelling a finished run does nothing
    assert len(cluster.server.deletes) == deletes and backend.status(run.handle).state is RunState.SUCCEEDED
    assert first.wait(timeout=60) is RunState.SUCCEEDED
    listed = [h.run_id for h in backend.list()]
    assert listed.index(run.id) < listed.index(first.id)  # newest first
