"""Slurm's job records as nbtrain reads them (pure: no cluster). The records are real ``scontrol show job -o``
lines captured from the 2-node test cluster (tests/data/slurm/scontrol_show_job.txt, its first line names the
Slurm version; regenerate with tests/integration/slurm/capture_scontrol.py)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from nbtrain.backends.slurm.jobstate import JobInfo, parse_jobs, queue_position, queued_detail, slurm_verdict
from nbtrain.model import RunState

CAPTURED = Path(__file__).resolve().parents[2] / "data" / "slurm" / "scontrol_show_job.txt"
TEXT = CAPTURED.read_text()
JOBS = parse_jobs(TEXT)
BY_NAME = {m["name"]: JOBS[m["id"]] for m in re.finditer(r"^JobId=(?P<id>\d+) JobName=(?P<name>\S+)", TEXT, re.M)}
LOG = "/store/runs/r1/attempts/0/supervisor.log"


def test_the_capture_says_which_slurm_wrote_it() -> None:
    assert re.match(r"# captured from slurm(-wlm)? \d+\.\d+\.\d+", TEXT), TEXT.splitlines()[0]


def test_every_captured_job_is_parsed_with_the_fields_nbtrain_reads() -> None:
    assert len(JOBS) == len(BY_NAME) == 9, sorted(BY_NAME)
    states = {name: job.state for name, job in BY_NAME.items()}
    assert states == {"timeout": "TIMEOUT", "nodefail": "NODE_FAIL", "running": "RUNNING", "completed": "COMPLETED",
                      "failed": "FAILED", "cancelled": "CANCELLED", "pending-older": "PENDING",
                      "pending-low": "PENDING", "pending-high": "PENDING"}
    assert BY_NAME["timeout"].time_limit == "00:01:00"
    assert BY_NAME["nodefail"].nodes == "n[1-2]"
    assert BY_NAME["running"].batch_host == "n1" and BY_NAME["running"].nodes == "n1"
    assert BY_NAME["failed"].exit_code == "3:0" and BY_NAME["completed"].exit_code == "0:0"
    assert {BY_NAME[n].priority for n in ("pending-older", "pending-low", "pending-high")} == {100, 300}
    assert all(BY_NAME[n].reason == "PartitionDown" and BY_NAME[n].partition == "down"
               for n in ("pending-older", "pending-low", "pending-high"))


@pytest.mark.parametrize(("name", "pending", "ended"), [
    ("pending-low", True, False), ("running", False, False), ("completed", False, True), ("timeout", False, True),
    ("nodefail", False, True), ("cancelled", False, True), ("failed", False, True)])
def test_pending_and_ended_follow_slurms_state(name: str, pending: bool, ended: bool) -> None:
    assert (BY_NAME[name].pending, BY_NAME[name].ended) == (pending, ended)


def test_output_without_jobs_or_with_words_nbtrain_does_not_read_parses() -> None:
    assert parse_jobs("No jobs in the system\n") == {}
    assert parse_jobs("") == {}
    # a later field with spaces and '=' (a Comment, a Command) never overrides an earlier one
    line = "JobId=7 JobName=x JobState=RUNNING Partition=debug Comment=JobState=FAILED Partition=evil x y=z"
    assert parse_jobs(line)["7"] == JobInfo("7", "RUNNING", partition="debug")
    assert parse_jobs("JobId=8 JobState=PENDING Priority=N/A")["8"].priority == 0


def test_queue_position_orders_higher_priority_then_older_then_lower_id() -> None:
    pending = [BY_NAME[n] for n in ("pending-older", "pending-low", "pending-high")]
    others = list(JOBS.values())
    assert [queue_position(job, others) for job in pending] == [1, 3, 2]
    assert queued_detail(BY_NAME["pending-low"], JOBS) == (
        f"queued: PartitionDown (position 3 in partition down, Slurm job {BY_NAME['pending-low'].job_id})")


def test_queue_position_counts_only_pending_jobs_of_the_same_partition() -> None:
    def job(job_id: str, priority: int, *, state: str = "PENDING", partition: str = "gpu",
            submitted: str = "2026-12-02T10:00:00") -> JobInfo:
        return JobInfo(job_id, state, "Resources", partition, priority, submitted)

    mine = job("20", 50, submitted="2026-12-02T10:00:05")
    jobs = [mine,
            job("10", 90), job("11", 50), job("12", 50, submitted="2026-12-02T10:00:05"),  # ahead: 3
            job("21", 50, submitted="2026-12-02T10:00:05"), job("13", 10),                 # behind
            job("14", 99, state="RUNNING"), job("15", 99, partition="cpu"), job("16", 99, state="COMPLETED")]
    assert queue_position(mine, jobs) == 4
    assert queue_position(job("30", 1), []) == 1
    held = dataclasses.replace(mine, reason="None")
    assert queued_detail(held, {j.job_id: j for j in jobs}).startswith("queued: waiting to be scheduled (position 4")


def _verdict(job: JobInfo | None, *, cancel_requested: bool = False) -> tuple[RunState, str]:
    state, failure = slurm_verdict(job, job.job_id if job else "99", cancel_requested=cancel_requested,
                                   supervisor_log=LOG)
    return state, failure.reason if failure else ""


def test_timeout_names_the_limit_and_the_option() -> None:
    state, reason = _verdict(BY_NAME["timeout"])
    assert state is RunState.FAILED
    assert "TIMEOUT" in reason and "00:01:00" in reason and "--time" in reason and "checkpoint" in reason, reason


def test_node_fail_names_slurms_state_and_the_fix() -> None:
    state, reason = _verdict(BY_NAME["nodefail"])
    assert state is RunState.FAILED
    assert "NODE_FAIL" in reason and "n[1-2]" in reason and "--sbatch exclude=" in reason and "resume" in reason


def test_a_cancel_from_outside_nbtrain_is_a_failure_that_says_so() -> None:
    job = BY_NAME["cancelled"]
    state, reason = _verdict(job)
    assert state is RunState.FAILED
    assert "CANCELLED" in reason and "outside nbtrain" in reason and job.job_id in reason, reason
    assert _verdict(job, cancel_requested=True) == (RunState.CANCELLED, "")  # the user's own cancel


# Slurm states this cluster cannot produce (no preemption, no memory enforcement without cgroups): a real
# record with Slurm's state word put in, as scontrol prints it
@pytest.mark.parametrize(("state", "words"), [
    ("PREEMPTED", ("PREEMPTED", "higher-priority", "--qos/--partition")),
    ("OUT_OF_MEMORY", ("OUT_OF_MEMORY", "mem-per-cpu", "batch size")),
])
def test_states_this_cluster_cannot_produce(state: str, words: tuple[str, ...]) -> None:
    job = dataclasses.replace(BY_NAME["running"], state=state)
    assert job.ended
    verdict, reason = _verdict(job)
    assert verdict is RunState.FAILED and all(w in reason for w in words) and job.job_id in reason, reason


def test_a_job_slurm_forgot_or_an_unknown_end_points_at_the_supervisor_log() -> None:
    state, reason = _verdict(None)
    assert state is RunState.FAILED and "no longer knows job 99" in reason and LOG in reason
    state, reason = _verdict(BY_NAME["failed"])
    assert state is RunState.FAILED and "FAILED" in reason and "3:0" in reason and LOG in reason, reason


@pytest.mark.parametrize("state", ["FAILED", "COMPLETED", "OUT_OF_MEMORY", "TIMEOUT"])
def test_a_script_that_left_nothing_in_the_store_says_the_store_is_not_shared(state: str) -> None:
    job = dataclasses.replace(BY_NAME["failed"], state=state)
    verdict, failure = slurm_verdict(job, job.job_id, cancel_requested=False, supervisor_log=LOG,
                                     unshared_store="/home/alice/.nbtrain")
    reason = failure.reason if failure else ""
    assert verdict is RunState.FAILED and state in reason and job.job_id in reason, reason
    for words in ("does not look shared with the nodes", "NBTRAIN_HOME=/home/alice/.nbtrain on this host",
                  "nbtrain doctor --backend slurm", "docs/slurm.md", "supervisor.log"):
        assert words in reason, (words, reason)
    assert "killed, or out of memory" not in reason and LOG not in reason  # not a missing path to look at


@pytest.mark.parametrize("state", ["CANCELLED", "NODE_FAIL", "BOOT_FAIL", "DEADLINE"])
def test_a_job_whose_script_may_never_have_run_keeps_slurms_verdict(state: str) -> None:
    # cancelled while queued, a node lost before the script started: no supervisor.log on a shared store either
    job = dataclasses.replace(BY_NAME["failed"], state=state)
    _, failure = slurm_verdict(job, job.job_id, cancel_requested=False, supervisor_log=LOG, unshared_store="/x")
    assert failure is not None and "shared" not in failure.reason and state in failure.reason, failure
    assert slurm_verdict(job, job.job_id, cancel_requested=True, supervisor_log=LOG,
                         unshared_store="/x") == (RunState.CANCELLED, None)
