"""``--max-restarts`` on a real Slurm cluster, when a failure ends the allocation and when it does not.

- a 1-node run whose node dies (its slurmd, stepds and tasks killed: Slurm says NODE_FAIL) continues as a new
  ``sbatch`` job on the other node, from the checkpoint the first attempt saved; with no budget, NODE_FAIL is the
  verdict; a process that follows the run only after the failure (``attach`` after the kernel died) submits the
  restart, and cancelling the restarted attempt leaves nothing in the queue and no process;
- a 2-node run (3-node cluster) that loses its second node: the surviving supervisor's probe step finds it, and the
  restart is a new job without it; a rank exception in a whole allocation still restarts in place (same job);
- the time limit: after a checkpoint the run continues in a new job, without one it is not restarted;
- preemption (partition priority, PreemptMode=CANCEL): the run continues once the nodes are free.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import Cluster
from cluster import test_cluster as start_cluster

from nbtrain.backends.slurm import SlurmBackend, cli
from nbtrain.backends.slurm.backend import job_leftovers
from nbtrain.bundle import capture_cell
from nbtrain.client import attach, submit_bundle
from nbtrain.model import RunState
from nbtrain.spec import JobSpec
from nbtrain.store import Store, read_json

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

# attempt 0 saves a checkpoint at step 3, says "ready 0" and waits to be killed; a later attempt restores it
# (nbtrain.restore returns the step after the checkpoint's) and returns where it started
CHECKPOINT_CELL = '''import os, time
import torch
import nbtrain
from accelerate import Accelerator
accelerator = Accelerator()
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt = accelerator.prepare(model, opt)
start = nbtrain.restore(accelerator)
attempt = int(os.environ["NBTRAIN_ATTEMPT"])
if attempt == 0:
    nbtrain.save_checkpoint(accelerator, 3)
    print("ready 0", flush=True)
    for _ in range(3000):
        time.sleep(0.1)
start
'''
# every attempt says "ready N" and waits
SLEEP_CELL = '''import os, time
print(f"ready {os.environ['NBTRAIN_ATTEMPT']}", flush=True)
for _ in range(3000):
    time.sleep(0.1)
'''
NODE_FAIL_S = 60  # slurmctld declares a silent node DOWN (and its job NODE_FAIL) after SlurmdTimeout=5 s + a ping


@pytest.fixture
def three_nodes(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """A 3-node cluster: a 2-node job that lost a node has two others to restart on."""
    with start_cluster(monkeypatch, nodes=3) as cluster:
        yield cluster


@pytest.fixture
def preempting(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """A 2-node cluster where a job of partition ``high`` preempts (cancels) one of partition ``low``."""
    with start_cluster(monkeypatch, partitions={"low": "PriorityTier=1", "high": "PriorityTier=2 PreemptMode=OFF"},
                       extra=("PreemptType=preempt/partition_prio", "PreemptMode=CANCEL")) as cluster:
        yield cluster


def _submit(home: Path, source: str, **spec: Any):  # type: ignore[no-untyped-def]
    store = Store(home)
    full = JobSpec(**{"backend": "slurm", "device": "cpu", "nodes": 1, "procs_per_node": 1, "max_restarts": 1,
                      **spec})
    return submit_bundle(capture_cell(source, {"__name__": "__main__"}), full, store=store,
                         backend=SlurmBackend(store))


def _wait_line(run, text: str, attempt: int, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while text not in run.logs(0, attempt=attempt).splitlines():
        assert time.monotonic() < deadline, f"run {run.id} never printed {text!r} in attempt {attempt}: " \
                                            f"{run.status()} {run.failure}"
        time.sleep(0.3)


def _job_id(home: Path, run_id: str, attempt: int) -> str:
    return str(read_json(Store(home).attempt_dir(run_id, attempt) / "slurm.json")["job_id"])


def _node_of(job_id: str) -> str:
    job = cli.jobs(fresh=True)[job_id]
    assert re.fullmatch(r"n\d", job.nodes), f"a 1-node job on {job.nodes!r}"
    return job.nodes


def _wait_gone(what: str, find, timeout: float = 15) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while (left := find()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"{what} still there {timeout:.0f} s after the verdict: {left}"


def _nothing_left(cluster: Cluster, run_id: str, job_ids: list[str]) -> None:
    for job_id in job_ids:
        _wait_gone(f"processes of job {job_id}", lambda j=job_id: job_leftovers(j, run_id))
    _wait_gone("job processes of the cluster", cluster.job_processes)
    _wait_gone("jobs in squeue", lambda: cluster.client("squeue", "-h", "-o", "%i %T").stdout.split())


def test_a_dead_node_restarts_the_run_in_a_new_allocation_from_its_checkpoint(home: Path,
                                                                              slurm_cluster: Cluster) -> None:
    run = _submit(home, CHECKPOINT_CELL)
    _wait_line(run, "ready 0", 0, 120)
    first = _job_id(home, run.id, 0)
    dead = _node_of(first)
    slurm_cluster.kill_node(dead, with_steps=True)

    assert run.wait(timeout=NODE_FAIL_S + 120, progress=False) is RunState.SUCCEEDED, (run.status(), run.failure)
    assert run.result(timeout=10) == 4, "attempt 1 did not resume from attempt 0's checkpoint (step 3)"
    attempts = run.attempts()
    assert [(a["attempt"], a["state"]) for a in attempts] == [(0, "failed"), (1, "succeeded")], attempts
    said = (attempts[0]["failure"] or {}).get("reason", "")
    assert "NODE_FAIL" in said and re.search(rf"\b{dead}\b", said), f"attempt 0's verdict names no node: {said}"
    second = _job_id(home, run.id, 1)
    assert second != first, "the restart ran in the dead job"
    survivor = _node_of(second)
    assert survivor != dead, f"attempt 1 ran on the dead node {dead}"
    _nothing_left(slurm_cluster, run.id, [first, second])


def test_attach_after_the_kernel_died_restarts_and_cancel_leaves_nothing(home: Path, slurm_cluster: Cluster) -> None:
    run = _submit(home, SLEEP_CELL)
    _wait_line(run, "ready 0", 0, 90)
    first = _job_id(home, run.id, 0)
    run.close()  # the kernel is gone: nothing follows the run while its node dies
    slurm_cluster.kill_node(_node_of(first), with_steps=True)
    deadline = time.monotonic() + NODE_FAIL_S
    while cli.jobs(fresh=True)[first].state != "NODE_FAIL":
        assert time.monotonic() < deadline, f"Slurm never said NODE_FAIL: {cli.jobs(fresh=True)[first]}"
        time.sleep(0.5)
    assert not Store(home).attempt_dir(run.id, 1).exists(), "a restart was submitted with nothing following the run"

    again = attach(run.id, store=Store(home))  # a new kernel: its watcher finds the failure and submits attempt 1
    _wait_line(again, "ready 1", 1, 120)
    second = _job_id(home, run.id, 1)
    assert second != first

    again.cancel()

    assert again.status() is RunState.CANCELLED, again.failure
    assert [(a["attempt"], a["state"]) for a in again.attempts()] == [(0, "failed"), (1, "cancelled")]
    _nothing_left(slurm_cluster, run.id, [first, second])


def test_with_no_budget_a_dead_node_is_the_verdict(home: Path, slurm_cluster: Cluster) -> None:
    run = _submit(home, SLEEP_CELL, max_restarts=0)
    _wait_line(run, "ready 0", 0, 90)
    first = _job_id(home, run.id, 0)
    dead = _node_of(first)
    slurm_cluster.kill_node(dead, with_steps=True)

    assert run.wait(timeout=NODE_FAIL_S + 30, raise_on_failure=False, progress=False) is RunState.FAILED
    said = run.failure.summary() if run.failure else ""
    assert "NODE_FAIL" in said and re.search(rf"\b{dead}\b", said) and "restarting" not in said, said
    assert [(a["attempt"], a["state"]) for a in run.attempts()] == [(0, "failed")]
    assert not Store(home).attempt_dir(run.id, 1).exists()
    _nothing_left(slurm_cluster, run.id, [first])


def test_a_lost_node_of_a_multi_node_job_gets_a_new_allocation_without_it(home: Path, three_nodes: Cluster) -> None:
    # the supervisor (on the first node) survives; srun only says the other node's task was "Killed", and slurmctld
    # still says RUNNING: a probe step finds the node gone, so the restart is a new job that excludes it
    run = _submit(home, SLEEP_CELL, nodes=2)
    _wait_line(run, "ready 0", 0, 90)
    first = _job_id(home, run.id, 0)
    names = three_nodes.client("scontrol", "show", "hostnames", cli.jobs(fresh=True)[first].nodes).stdout.split()
    assert len(names) == 2, names
    dead = names[1]
    three_nodes.kill_node(dead)

    _wait_line(run, "ready 1", 1, 120)
    second = _job_id(home, run.id, 1)
    assert second != first, "the restart ran in the allocation that lost a node"
    placed = three_nodes.client("scontrol", "show", "hostnames", cli.jobs(fresh=True)[second].nodes).stdout.split()
    assert dead not in placed and len(placed) == 2, f"attempt 1 runs on {placed}, {dead} is dead"
    said = (run.attempts()[0]["failure"] or {}).get("reason", "")
    assert re.search(rf"node {dead} is lost", said), f"not the supervisor's probe verdict: {said}"
    run.cancel()
    assert run.status() is RunState.CANCELLED, run.failure
    _nothing_left(three_nodes, run.id, [first, second])


def test_a_rank_failure_in_a_whole_allocation_restarts_in_place(home: Path, slurm_cluster: Cluster) -> None:
    # every node answers the probe: the next attempt is a new step of the same job, no new allocation
    cell = 'import os\nif os.environ["NBTRAIN_ATTEMPT"] == "0":\n    raise RuntimeError("attempt 0 fails")\n7\n'
    run = _submit(home, cell, nodes=2)
    assert run.wait(timeout=150, progress=False) is RunState.SUCCEEDED, (run.status(), run.failure)
    assert run.result(timeout=10) == 7
    assert [(a["attempt"], a["state"]) for a in run.attempts()] == [(0, "failed"), (1, "succeeded")]
    assert _job_id(home, run.id, 1) == _job_id(home, run.id, 0), "a rank failure left its whole allocation"


def test_the_time_limit_after_a_checkpoint_continues_in_a_new_allocation(home: Path, slurm_cluster: Cluster) -> None:
    # Slurm's smallest limit is one minute, enforced about every 30 s; attempt 1 restores step 3 and ends at once
    run = _submit(home, CHECKPOINT_CELL, time_limit="1")
    assert run.wait(timeout=240, progress=False) is RunState.SUCCEEDED, (run.status(), run.failure)
    assert run.result(timeout=10) == 4
    attempts = run.attempts()
    assert [(a["attempt"], a["state"]) for a in attempts] == [(0, "failed"), (1, "succeeded")], attempts
    assert "TIMEOUT" in (attempts[0]["failure"] or {}).get("reason", ""), attempts[0]
    assert _job_id(home, run.id, 1) != _job_id(home, run.id, 0)


def test_the_time_limit_without_a_checkpoint_is_not_restarted(home: Path, slurm_cluster: Cluster) -> None:
    run = _submit(home, SLEEP_CELL, time_limit="1")
    assert run.wait(timeout=200, raise_on_failure=False, progress=False) is RunState.FAILED
    said = run.failure.reason if run.failure else ""
    assert "TIMEOUT" in said and "saved no checkpoint" in said, said
    assert [(a["attempt"], a["state"]) for a in run.attempts()] == [(0, "failed")]
    assert not Store(home).attempt_dir(run.id, 1).exists()


def test_a_preempted_run_continues_in_a_new_allocation_once_the_nodes_are_free(home: Path,
                                                                              preempting: Cluster) -> None:
    run = _submit(home, CHECKPOINT_CELL, partition="low")
    _wait_line(run, "ready 0", 0, 120)
    first = _job_id(home, run.id, 0)
    # a higher-tier job that wants every node, whole: Slurm cancels the run's job for it (PREEMPTED)
    high = preempting.client("sbatch", "--parsable", "-p", "high", "-N", "2", "--exclusive", "--output", "/dev/null",
                             "--wrap", "sleep 3")
    assert high.returncode == 0, high.stderr

    assert run.wait(timeout=150, progress=False) is RunState.SUCCEEDED, (run.status(), run.failure)
    assert run.result(timeout=10) == 4
    attempts = run.attempts()
    assert [(a["attempt"], a["state"]) for a in attempts] == [(0, "failed"), (1, "succeeded")], attempts
    assert "PREEMPTED" in (attempts[0]["failure"] or {}).get("reason", ""), attempts[0]
    assert _job_id(home, run.id, 1) != first
    _nothing_left(preempting, run.id, [first, _job_id(home, run.id, 1)])
