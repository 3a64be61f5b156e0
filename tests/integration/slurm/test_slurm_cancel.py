"""Cancel on a real 2-node Slurm cluster ends every process of the run, a task that daemonised included.

With ``proctrack/linuxproc`` (no cgroups) Slurm loses a task's child that double-forked into its own session:
``scancel`` ends the tasks, not it. The backend finds such a child by ``SLURM_JOB_ID`` and the run marker in
its environment; this test is the user's view of that promise: after ``run.cancel()`` returns, nothing with the
job's id in its environment is alive.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from cluster import Cluster

from nbtrain.backends.slurm import SlurmBackend
from nbtrain.backends.slurm.backend import job_leftovers
from nbtrain.bundle import capture_cell
from nbtrain.client import submit_bundle
from nbtrain.model import RunState
from nbtrain.spec import JobSpec
from nbtrain.store import Store, read_json

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

# every rank double-forks a `sleep` into its own session (a daemon), says so, then blocks
DAEMONISING_CELL = '''import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "321"])
    os._exit(0)
os.wait()
print("daemonised", flush=True)
while True:
    time.sleep(0.1)
'''


def _with_job_id(job_id: str) -> list[tuple[int, str]]:
    """Live processes of this machine whose environment says ``SLURM_JOB_ID=job_id`` (PID, command line)."""
    needle = f"SLURM_JOB_ID={job_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
                continue
            found.append((int(entry.name), (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()))
        except (OSError, IndexError):
            continue
    return found


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[1])


def test_cancel_ends_a_task_that_daemonised_on_every_node(home: Path, slurm_cluster: Cluster) -> None:
    store = Store(home)
    spec = JobSpec(backend="slurm", device="cpu", nodes=2, procs_per_node=1)
    run = submit_bundle(capture_cell(DAEMONISING_CELL, {"__name__": "__main__"}), spec, store=store,
                        backend=SlurmBackend(store))
    job_id = str(read_json(store.attempt_dir(run.id, 0) / "slurm.json")["job_id"])
    deadline = time.monotonic() + 90
    while len([p for p in _with_job_id(job_id) if p[1] == "sleep 321"]) < 2:
        assert not run.status().terminal, (run.status(), run.failure)
        assert time.monotonic() < deadline, f"the ranks never daemonised: {_with_job_id(job_id)}\n{run.logs(0)}"
        time.sleep(0.2)
    of_job = {pid for pid, _ in _with_job_id(job_id)}
    sleeps = [pid for pid, cmd in _with_job_id(job_id) if cmd == "sleep 321"]
    assert not of_job & {_parent(pid) for pid in sleeps}, "a sleep still has a parent in the job: not daemonised"

    run.cancel()

    assert run.status() is RunState.CANCELLED, run.failure
    assert job_leftovers(job_id, run.id) == [], "cancel returned with processes of the run alive"
    assert _with_job_id(job_id) == [], "cancel returned with processes of the Slurm job alive"
    assert slurm_cluster.client("squeue", "-h", "-j", job_id, "-o", "%T").stdout.strip() == ""
