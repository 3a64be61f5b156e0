"""srun's task reports -> the node that failed first (a dead node is named, not the victim its death killed)."""

from __future__ import annotations

import pytest

from nbtrain.backends.slurm.steplog import blame_node, first_task_failure, parse_task_ends, unreachable_node
from nbtrain.model import Failure

DEAD_NODE = """srun: error: n2: task 1: Killed
srun: launch/slurm: _step_signal: Terminating StepId=2.0
srun: forcing job termination
srun: Job step aborted: Waiting up to 4 seconds for job step to finish.
srun: error: n1: task 0: Exited with exit code 1
"""
NODE_OF = {0: 0, 1: 0, 2: 1, 3: 1}
VANISHED = Failure(reason="the process disappeared without reporting", rank=0, node=0)


def test_the_first_task_srun_reports_is_the_cause_and_the_rest_collateral() -> None:
    ends = parse_task_ends(DEAD_NODE)
    assert [(e.node_name, e.task, e.exit_code, e.collateral) for e in ends] == [
        ("n2", 1, -9, False), ("n1", 0, 1, True)]
    first = first_task_failure(DEAD_NODE)
    assert first is not None and first.said == "n2: task 1: Killed"


def test_a_vanished_rank_on_a_surviving_node_yields_to_the_dead_node() -> None:
    blamed = blame_node(VANISHED, DEAD_NODE, node_of=NODE_OF, last_lines={2: ["ready"]})
    assert blamed is not None
    assert (blamed.rank, blamed.node, blamed.signal, blamed.last_lines) == (2, 1, "SIGKILL", ("ready",))
    assert "node 1 (n2) were killed" in blamed.reason and "scontrol show node n2" in blamed.reason


def test_a_rank_that_raised_keeps_the_blame() -> None:
    raised = Failure(reason="the training code raised an exception", rank=0, node=0, exc_type="ValueError")
    assert blame_node(raised, DEAD_NODE, node_of=NODE_OF, last_lines={}) is None


def test_evidence_that_agrees_with_srun_is_kept() -> None:
    text = "srun: error: n2: task 1: Exited with exit code 3\nsrun: forcing job termination\n"
    same = Failure(reason="exited", rank=3, node=1, exit_code=3)
    assert blame_node(same, text, node_of=NODE_OF, last_lines={}) is None


def test_a_rank_killed_on_the_node_srun_names_keeps_the_blame_in_srun_words() -> None:
    killed = Failure(reason="killed from outside (often the kernel's OOM killer)", rank=3, node=1, exit_code=-9,
                     signal="SIGKILL")
    blamed = blame_node(killed, DEAD_NODE, node_of=NODE_OF, last_lines={3: ["ready"]})
    assert blamed is not None and (blamed.rank, blamed.node, blamed.signal, blamed.last_lines) == (
        3, 1, "SIGKILL", ("ready",))
    assert "node 1 (n2) were killed (srun: n2: task 1: Killed)" in blamed.reason, blamed.reason


def test_nothing_reported_before_termination_keeps_the_ranks_evidence() -> None:
    cancelled = "srun: forcing job termination\nsrun: error: n1: task 0: Killed\n"
    assert first_task_failure(cancelled) is None
    assert blame_node(VANISHED, cancelled, node_of=NODE_OF, last_lines={}) is None
    assert blame_node(VANISHED, "", node_of=NODE_OF, last_lines={}) is None


def test_an_exit_code_is_reported_in_srun_words() -> None:
    text = "srun: error: n1: task 0: Exited with exit code 3\nsrun: forcing job termination\n"
    blamed = blame_node(Failure(reason="gone", rank=2, node=1), text, node_of=NODE_OF, last_lines={})
    assert blamed is not None and (blamed.rank, blamed.exit_code, blamed.signal) == (0, 3, None)
    assert "(srun: n1: task 0: Exited with exit code 3)" in blamed.reason


def test_a_node_failure_without_a_task_line_names_the_node() -> None:
    blamed = blame_node(None, "srun: error: Node failure on n7\n", node_of=NODE_OF, last_lines={})
    assert blamed is not None and "Slurm node n7 failed" in blamed.reason and "exclude=n7" in blamed.reason


@pytest.mark.parametrize(("said", "node"), [
    ("srun: error: Task launch for StepId=5.2 failed on node n2: Communication connection failure", "n2"),
    ("srun: error: Node failure on n3", "n3"),
    ("srun: error: n2: task 1: Killed", "n2"),
    ("srun: error: Unable to create step for job 5: Job/step already completing or completed; "
     "srun: error: Task launch for StepId=5.1 failed on node n4: Connection refused", "n4"),
    ("srun: error: Unable to create step for job 5: Invalid job id specified", None),
])
def test_the_node_a_probe_could_not_start_a_task_on_is_named(said: str, node: str | None) -> None:
    assert unreachable_node(said) == node
