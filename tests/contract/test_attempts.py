"""Attempts on every backend: resume is a new attempt the handle follows; a restart budget is honoured or refused;
a resume or rerun the cluster refuses leaves the run as it was."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from helpers import BackendUnderTest, settle, wait_for

from nbtrain.client import rerun
from nbtrain.errors import NbtrainError, SpecError
from nbtrain.model import RunState

pytestmark = [pytest.mark.slow, pytest.mark.timeout(200)]

# fails on attempt 0, succeeds on any later attempt with 10 * attempt + rank
ATTEMPT_CELL = '''import os, time
attempt = int(os.environ["NBTRAIN_ATTEMPT"])
print(f"attempt {attempt}", flush=True)
if attempt == 0:
    raise RuntimeError("attempt 0 fails on purpose")
time.sleep(1)
10 * attempt + int(os.environ["RANK"])
'''


def _attempt_states(run: object) -> list[tuple[int, str]]:
    return [(a["attempt"], a["state"]) for a in run.attempts()]  # type: ignore[attr-defined]


def test_resume_is_a_new_attempt_that_status_and_wait_follow(under_test: BackendUnderTest) -> None:
    run = under_test.submit(ATTEMPT_CELL, name="resumed", procs_per_node=2)
    assert run.wait(timeout=90, raise_on_failure=False, progress=False) is RunState.FAILED
    run.resume()
    state = run.status()
    assert not state.terminal, f"right after resume(), status() is {state.value}: attempt 0's verdict, not attempt 1's"
    assert run.wait(timeout=90, progress=False) is RunState.SUCCEEDED
    assert run.result(timeout=10) == 10  # rank 0 of attempt 1
    assert _attempt_states(run) == [(0, "failed"), (1, "succeeded")]


def test_a_restart_budget_is_honoured_or_refused_before_anything_starts(under_test: BackendUnderTest) -> None:
    if "max_restarts" not in under_test.refused:
        run = under_test.submit(ATTEMPT_CELL, name="restarted", procs_per_node=2, max_restarts=1)
        assert run.wait(timeout=150, progress=False) is RunState.SUCCEEDED
        assert run.result(timeout=10) == 10
        assert _attempt_states(run) == [(0, "failed"), (1, "succeeded")]
        return
    before = Counter(under_test.footprint())
    try:
        run = under_test.submit(ATTEMPT_CELL, name="restarted", procs_per_node=2, max_restarts=1)
    except SpecError as error:
        message = str(error)
    else:
        run.cancel()
        pytest.fail(f"{under_test.name} accepted --max-restarts 1 and started run {run.id}; it does not restart "
                    "ranks, so it must refuse the option before anything starts")
    assert "--max-restarts" in message and under_test.name in message, message
    assert under_test.store.ids() == [], "a refused submit left a run record"
    runs = under_test.store.root / "runs"
    assert not (runs.is_dir() and any(runs.iterdir())), f"a refused submit left {list(runs.iterdir())}"
    started = Counter(under_test.footprint()) - before
    assert not started, f"a refused submit still did: {sorted(started)}"


def _tree(root: Path) -> list[str]:
    """The run directory's attempt directories and record, as paths (event files grow; these must not appear)."""
    return sorted([str(p.relative_to(root)) for p in (root / "attempts").iterdir()] + [p.name for p in root.glob("*.json")])


def test_a_resume_or_rerun_the_cluster_refuses_leaves_the_run_as_it_was(under_test: BackendUnderTest) -> None:
    with under_test.refusing_submits():
        pass  # skips here, before any run, where the backend's submit cannot be made to fail for a real reason
    run = under_test.submit(ATTEMPT_CELL, name="kept", procs_per_node=2)
    assert run.wait(timeout=90, raise_on_failure=False, progress=False) is RunState.FAILED
    wait_for(lambda: under_test.store.load(run.id).state == RunState.FAILED.value, 10, "the verdict in the record")
    root = under_test.store.run_dir(run.id)
    record, tree, attempts = under_test.store.load(run.id).to_dict(), _tree(root), _attempt_states(run)
    held = Counter(under_test.leftovers())  # what a failed run keeps (Kubernetes: its Job, for a week)

    with under_test.refusing_submits() as said:
        with pytest.raises(NbtrainError) as resumed:
            run.resume()
        with pytest.raises(NbtrainError) as rerun_:
            rerun(run.id, store=under_test.store)
    for what, caught in (("resume", resumed), ("rerun", rerun_)):
        assert said in str(caught.value).lower(), f"the refused {what} does not say why: {caught.value}"

    assert under_test.store.ids() == [run.id], "the refused rerun left a run record"
    assert under_test.store.load(run.id).to_dict() == record, "the refused resume changed the run's record"
    assert _tree(root) == tree, "the refused resume left an attempt behind"
    assert run.status() is RunState.FAILED, "after a refused resume the run is no longer attempt 0's FAILED"
    assert _attempt_states(run) == attempts
    assert not settle(lambda: sorted((Counter(under_test.leftovers()) - held).elements()), 10), \
        "the refused submits left something behind"

    run.resume()  # the cluster takes it now: the next attempt is 1, as if the refused one had never been
    assert run.wait(timeout=90, progress=False) is RunState.SUCCEEDED
    assert _attempt_states(run) == [(0, "failed"), (1, "succeeded")]
