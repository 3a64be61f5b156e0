"""One cell's life on every backend: its value and events, a failing rank named, a cancel that ends everything."""

from __future__ import annotations

import pytest
from helpers import BackendUnderTest, LineCollector, drain, settle, wait_for_line

from nbtrain.errors import RunFailedError
from nbtrain.events import EventKind
from nbtrain.model import RunState

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

LINES = 20
COUNT_CELL = f'''import os
for i in range({LINES}):
    print(f"line {{i}}", flush=True)
{{"rank": int(os.environ["RANK"]), "answer": 42}}
'''


def test_a_cell_returns_its_value_and_each_event_arrives_once(under_test: BackendUnderTest) -> None:
    run = under_test.submit(COUNT_CELL, name="count", procs_per_node=2)
    handle = under_test.handle(run.id)
    events = drain(under_test.backend.events(handle, follow=True, poll_s=0.05), 90, f"events(follow=True) of {run.id}")

    keys = [event.key for event in events]
    assert len(keys) == len(set(keys)), f"events delivered twice: {sorted(k for k in keys if keys.count(k) > 1)}"
    states = [event for event in events if event.kind is EventKind.STATE]
    assert states, f"no STATE event among {[e.kind.value for e in events]}"
    verdict = states[-1]
    assert verdict.data["state"] == RunState.SUCCEEDED.value, verdict
    assert [e for e in events if e.source == verdict.source][-1] is verdict, "events after the verdict of its source"
    assert sum(RunState(e.data["state"]).terminal for e in states) == 1, "more than one terminal STATE event"
    assert {EventKind.RANK_START, EventKind.RANK_DONE} <= {e.kind for e in events}

    lines = LineCollector(under_test.cursor(run.id).poll)
    lines.read()
    for rank in (0, 1):
        assert lines.texts(rank, "line ") == [f"line {i}" for i in range(LINES)], f"rank {rank}'s lines"
    assert run.status() is RunState.SUCCEEDED
    assert run.result(timeout=30) == {"rank": 0, "answer": 42}


FAILING_CELL = '''import os, time
rank = int(os.environ["RANK"])
print(f"rank {rank} up", flush=True)
if rank == 1:
    raise ValueError("rank one cannot go on")
for _ in range(600):
    time.sleep(0.1)
'''
# as the user sees the cell: line 1 is its %%distributed line, the body starts at line 2
RAISE_LINE = FAILING_CELL.splitlines().index('    raise ValueError("rank one cannot go on")') + 2


def test_the_failing_rank_is_named_with_its_traceback_and_cell_line(under_test: BackendUnderTest) -> None:
    run = under_test.submit(FAILING_CELL, name="boom", nodes=2, procs_per_node=1)
    with pytest.raises(RunFailedError) as caught:
        run.wait(timeout=90, progress=False)
    failure = caught.value.failure
    assert failure is not None, str(caught.value)
    assert failure.rank == 1, failure
    assert failure.exc_type == "ValueError", failure
    assert failure.traceback and "rank one cannot go on" in failure.traceback, failure
    assert failure.cell_line == RAISE_LINE, failure
    assert "rank 1" in str(caught.value) and "ValueError: rank one cannot go on" in str(caught.value)
    left = settle(lambda: under_test.processes(run.id), 5)
    assert not left, f"run {run.id} is FAILED but its processes {left} still run (rank 0 sleeps 60 s)"


SLEEP_CELL = '''import time
print("ready", flush=True)
for _ in range(600):
    time.sleep(0.1)
'''


def test_cancel_ends_a_running_gang_and_every_process(under_test: BackendUnderTest) -> None:
    """Cancel ends the gang's processes and everything the backend made for the run: supervisors (local), the
    workload and what it owns (Kubernetes), the batch job (Slurm)."""
    run = under_test.submit(SLEEP_CELL, name="cancelled", procs_per_node=2)
    wait_for_line(under_test, run.id, "ready", timeout=60)
    assert under_test.processes(run.id), "the gang printed 'ready' but no process of it is visible"
    run.cancel()
    assert run.status() is RunState.CANCELLED
    left = settle(lambda: under_test.processes(run.id), 5)
    assert not left, f"cancel() returned (run {run.id} CANCELLED) but processes {left} still run after 5 s"
    held = settle(under_test.leftovers, 10)
    assert not held, f"cancel() returned (run {run.id} CANCELLED) but {under_test.name} still holds {held} after 10 s"
