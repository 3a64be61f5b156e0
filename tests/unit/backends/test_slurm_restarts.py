"""What a failed Slurm attempt does next (pure: no cluster): a new step in the allocation, a new allocation, or
nothing, from Slurm's job state, srun's evidence of a lost node, the user's cancel, the budget and checkpoints."""

from __future__ import annotations

import pytest

from nbtrain.backends.slurm.restarts import Restart, RestartDecision, decide_restart, restart_note


def _decide(job_state: str | None = "RUNNING", *, node_failed: str | None = None, cancelled: bool = False,
            attempt: int = 0, budget: int = 1, checkpointed: bool = False) -> RestartDecision:
    return decide_restart(job_state=job_state, node_failed=node_failed, cancelled=cancelled, attempt=attempt,
                          restart_budget=budget, checkpointed=checkpointed)


def test_a_rank_failure_in_a_live_allocation_restarts_as_a_new_step_in_it() -> None:
    assert _decide("RUNNING").restart is Restart.IN_PLACE
    assert _decide("COMPLETING").restart is Restart.IN_PLACE


@pytest.mark.parametrize("state", ["NODE_FAIL", "PREEMPTED", "BOOT_FAIL"])
def test_an_allocation_slurm_ended_gets_a_new_one(state: str) -> None:
    assert _decide(state).restart is Restart.NEW_ALLOCATION
    assert _decide(state, checkpointed=True).restart is Restart.NEW_ALLOCATION


def test_a_node_srun_saw_fail_gets_a_new_allocation_before_slurmctld_says_node_fail() -> None:
    # slurmctld declares NODE_FAIL only after SlurmdTimeout; the step already lost the node: never restart in it
    assert _decide("RUNNING", node_failed="n2").restart is Restart.NEW_ALLOCATION


@pytest.mark.parametrize("state", ["FAILED", "COMPLETED"])
def test_a_batch_script_that_ended_by_itself_is_a_failure_restarted_in_a_new_allocation(state: str) -> None:
    # the supervisor crashed or was killed, or meant to restart in place but the allocation ended first
    assert _decide(state).restart is Restart.NEW_ALLOCATION


def test_the_time_limit_restarts_only_an_attempt_that_saved_a_checkpoint() -> None:
    assert _decide("TIMEOUT", checkpointed=True).restart is Restart.NEW_ALLOCATION
    refused = _decide("TIMEOUT", checkpointed=False)
    assert refused.restart is Restart.NONE and "no checkpoint" in refused.why_not and "time limit" in refused.why_not


def test_out_of_memory_is_not_restarted_with_the_same_memory_request() -> None:
    # like TIMEOUT without a checkpoint: the same request fails the same way; even a checkpoint does not help
    for checkpointed in (False, True):
        refused = _decide("OUT_OF_MEMORY", checkpointed=checkpointed, budget=3)
        assert refused.restart is Restart.NONE, refused
        for words in ("same memory request", "--sbatch mem=", "mem-per-cpu", "resume"):
            assert words in refused.why_not, (words, refused.why_not)


@pytest.mark.parametrize(("state", "said"), [("CANCELLED", "cancelled outside nbtrain"), (None, "no longer knows"),
                                             ("DEADLINE", "DEADLINE")])
def test_what_someone_meant_or_nobody_knows_is_not_restarted(state: str | None, said: str) -> None:
    decision = _decide(state, checkpointed=True)
    assert decision.restart is Restart.NONE and said in decision.why_not, decision


@pytest.mark.parametrize("state", ["RUNNING", "NODE_FAIL", "TIMEOUT", "FAILED"])
def test_no_budget_or_a_cancel_means_no_restart_and_nothing_to_add(state: str) -> None:
    for decision in (_decide(state, attempt=1, budget=1, checkpointed=True), _decide(state, budget=0),
                     _decide(state, cancelled=True, checkpointed=True, node_failed="n1")):
        assert decision == RestartDecision(Restart.NONE), decision
        assert restart_note(decision, attempt=1, restart_budget=1, job_id="7") == ""


def test_the_note_says_where_the_next_attempt_runs() -> None:
    assert restart_note(RestartDecision(Restart.IN_PLACE), attempt=0, restart_budget=2, job_id="7") == \
        "restarting from the last checkpoint as a new step of Slurm job 7 (attempt 1 of 2)"
    assert restart_note(RestartDecision(Restart.NEW_ALLOCATION), attempt=1, restart_budget=2, job_id="7") == \
        "restarting from the last checkpoint in a new Slurm allocation (attempt 2 of 2)"


@pytest.mark.parametrize("state", ["FAILED", "COMPLETED", "OUT_OF_MEMORY", "TIMEOUT"])
def test_a_script_whose_files_never_reached_the_store_is_not_restarted(state: str) -> None:
    # NBTRAIN_HOME not shared with the nodes: every new allocation would end the same way, spending the budget
    decision = decide_restart(job_state=state, node_failed=None, cancelled=False, attempt=0, restart_budget=3,
                              checkpointed=True, store_unseen=True)
    assert decision.restart is Restart.NONE and "never reached this host's store" in decision.why_not, decision
    assert restart_note(decision, attempt=0, restart_budget=3, job_id="7") == decision.why_not


@pytest.mark.parametrize("state", ["NODE_FAIL", "BOOT_FAIL", "PREEMPTED"])
def test_an_allocation_lost_before_the_script_wrote_anything_is_still_restarted(state: str) -> None:
    # a node that failed (to boot) before the batch script started leaves no supervisor.log on a shared store either
    assert decide_restart(job_state=state, node_failed=None, cancelled=False, attempt=0, restart_budget=1,
                          checkpointed=False, store_unseen=True).restart is Restart.NEW_ALLOCATION


def test_a_job_slurm_says_is_over_never_restarts_in_place() -> None:
    """A state that reads alive (COMPLETING) of a job that has ended: no step can start in it any more."""
    ended = decide_restart(job_state="COMPLETING", node_failed=None, cancelled=False, attempt=0, restart_budget=1,
                           checkpointed=False, job_ended=True)
    assert ended.restart is Restart.NEW_ALLOCATION
    alive = decide_restart(job_state="COMPLETING", node_failed=None, cancelled=False, attempt=0, restart_budget=1,
                           checkpointed=False)
    assert alive.restart is Restart.IN_PLACE
