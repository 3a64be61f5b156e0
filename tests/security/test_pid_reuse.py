"""A supervisor PID that now belongs to an unrelated process is never trusted nor signalled."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from nbtrain.backends.base import RunHandle
from nbtrain.backends.local.backend import LocalBackend
from nbtrain.model import RunState
from nbtrain.runtime import watchdog
from nbtrain.spec import JobSpec
from nbtrain.store import RunRecord, Store, write_json_atomic


def test_a_reused_supervisor_pid_is_neither_trusted_nor_signalled(home: Path) -> None:
    store = Store()
    run_id = store.new_run_id("stale")
    unrelated = subprocess.Popen(["sleep", "60"])  # a real process that happens to have the old supervisor's PID
    try:
        pid, started = watchdog.identity(unrelated.pid).split(":")
        assert started, "the unrelated process must be alive"
        stale_identity = f"{pid}:{int(started) - 12345}"  # the supervisor that wrote the file started earlier
        attempt_dir = store.attempt_dir(run_id, 0)
        write_json_atomic(attempt_dir / "status.json", {
            "state": "running", "attempt": 0, "started": time.time() - 60, "ended": None, "failure": None,
            "retrying": False, "supervisor_pid": int(pid), "supervisor": stale_identity, "launchers": [],
            "updated": time.time() - 50})
        handle = RunHandle("local", run_id, {"attempt": 0, "supervisor_pid": int(pid)})
        store.save(RunRecord(run_id=run_id, spec=JobSpec(name="stale"), bundle_digest="0" * 64, backend="local",
                             handle=dict(handle.data)))
        backend = LocalBackend(store)

        status = backend.status(handle)
        assert status.state is RunState.FAILED  # not "running" forever
        assert status.failure is not None and "died without a verdict" in status.failure.reason
        backend.cancel(handle)
        time.sleep(0.5)
        assert unrelated.poll() is None, "cancel signalled a process that merely reused the supervisor's PID"
        assert backend.status(handle).state is RunState.FAILED
    finally:
        unrelated.kill()
        unrelated.wait()
