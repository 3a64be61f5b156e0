"""The supervisor's verdict rules, driven with small real programs in place of `accelerate launch`.

These cover outcomes a real gang produces only by chance (a gloo abort after a clean finish) or slowly.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from procs import pids_with_env  # tests/support, put on sys.path by tests/conftest.py

from nbtrain.backends.base import Plan, RunHandle
from nbtrain.backends.local import LocalBackend
from nbtrain.model import RunState
from nbtrain.spec import JobSpec
from nbtrain.store import Store

# A stand-in for a node's launcher: reports like the runtime would for its ranks, then ends as told.
FAKE_LAUNCHER = r'''
import os, signal, sys, time
from nbtrain.events import EventKind, EventWriter
events, ranks, ending = sys.argv[1], [int(r) for r in sys.argv[2].split(",")], sys.argv[3]
for rank in ranks:
    w = EventWriter(__import__("pathlib").Path(events) / f"rank-{rank}.jsonl", f"rank-{rank}", rank=rank)
    w.emit(EventKind.RANK_START, node=0, local_rank=rank, pid=os.getpid(), host="h")
    if ending not in ("silent-exit-1", "hang"):
        w.emit(EventKind.RANK_DONE, ok=True, has_result=False)
print("launcher last words", flush=True)
if ending == "abort":
    os.kill(os.getpid(), signal.SIGABRT)
elif ending in ("sleep", "hang"):
    time.sleep(60)
elif ending == "silent-exit-1":
    sys.exit(1)
'''


def _plan(store: Store, ending: str, *, timeout_s: float | None = None) -> Plan:
    backend = LocalBackend(store)
    run_id = store.new_run_id("rules")
    real = backend.plan(JobSpec(name="rules", nodes=1, procs_per_node=2, device="cpu", timeout_s=timeout_s),
                        "/nonexistent", "0" * 64, run_id)
    request = real.request
    argv = (sys.executable, "-c", FAKE_LAUNCHER, str(request.events_dir), "0,1", ending)
    request = replace(request, launchers=(replace(request.launchers[0], argv=argv),))
    return Plan(real.backend, run_id, real.spec, real.bundle_digest, real.bundle_dir, request, real.notices)


def _final(backend: LocalBackend, handle: RunHandle, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = backend.status(handle)
        if status.state.terminal:
            return status
        time.sleep(0.1)
    raise AssertionError(f"no verdict within {timeout} s: {backend.status(handle)}")


def test_abort_after_every_rank_finished_is_still_success(home: Path) -> None:
    store = Store()
    backend = LocalBackend(store)
    status = _final(backend, backend.submit(_plan(store, "abort")))
    assert status.state is RunState.SUCCEEDED and status.failure is None


def test_launcher_failing_before_ranks_report_names_the_node(home: Path) -> None:
    store = Store()
    backend = LocalBackend(store)
    status = _final(backend, backend.submit(_plan(store, "silent-exit-1")))
    assert status.state is RunState.FAILED
    failure = status.failure
    assert failure is not None
    assert failure.rank in (0, 1)  # its ranks vanished without a word; the node and reason are reported
    assert failure.summary().startswith(f"rank {failure.rank} (node 0) failed")


def test_timeout_fails_the_run_and_ends_the_gang(home: Path, survivors: Any) -> None:
    store = Store()
    backend = LocalBackend(store)
    plan = _plan(store, "hang", timeout_s=2)  # ranks started, never finish
    started = time.monotonic()
    status = _final(backend, backend.submit(plan))
    assert status.state is RunState.FAILED
    assert "timeout of 2" in status.failure.reason
    assert time.monotonic() - started < 15
    assert pids_with_env("NBTRAIN_RUN_ID", {plan.run_id}) == []  # the gang was gone before the verdict
    deadline = time.monotonic() + 5  # the supervisor that wrote the verdict may still be exiting
    while survivors() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert survivors() == []


def test_supervisor_that_dies_is_reported_not_hung(home: Path, survivors: Any) -> None:
    store = Store()
    backend = LocalBackend(store)
    handle = backend.submit(_plan(store, "hang"))
    deadline = time.monotonic() + 30
    while backend.status(handle).state is not RunState.RUNNING and time.monotonic() < deadline:
        time.sleep(0.1)
    os.kill(int(handle.data["supervisor_pid"]), signal.SIGKILL)
    status = _final(backend, handle)
    assert status.state is RunState.FAILED
    assert "supervisor" in status.failure.reason and "died" in status.failure.reason
    assert survivors() == []  # a terminal run never leaves a process: the observer ended the gang first
    backend.cancel(handle)  # idempotent on a terminal run
    assert backend.status(handle).state is RunState.FAILED
