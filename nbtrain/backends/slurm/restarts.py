"""What a failed Slurm attempt does next under ``--max-restarts`` (pure: observations in, a decision out).

Three answers (:class:`nbtrain.gang.restarts.Restart`, the placement the shared policy reads):

- ``IN_PLACE``: a new ``srun`` step in the same allocation, started by the supervisor inside it. Only while the
  allocation is alive and whole: a rank failed (an exception, a crash, a killed process) and Slurm still runs the
  job, with no node lost.
- ``NEW_ALLOCATION``: a new ``sbatch`` job for the next attempt, submitted from outside the allocation (by whichever
  process next asks for the run's status: the kernel's watcher, ``attach``, the CLI; see :mod:`.backend`). When the
  allocation is gone or going: a node failed (``NODE_FAIL``, or ``srun`` saw "Node failure on NAME" before
  slurmctld did), Slurm preempted the job (``PREEMPTED``) or a node failed to boot (``BOOT_FAIL``); or the batch
  script itself ended with a failure to restart (``FAILED``/``COMPLETED``: the supervisor
  crashed, was killed, or wanted a restart in place but the allocation ended first). A restarted attempt resumes
  from the run's latest checkpoint either way (``NBTRAIN_CHECKPOINT_DIR`` is the same for every attempt).
- ``NONE``: the verdict stands. When the user cancelled, the budget is spent, the batch script ran but nothing it
  writes reached the kernel's view of the store (``NBTRAIN_HOME`` is not shared with the nodes: every new
  allocation would end the same way), someone cancelled the job outside
  nbtrain (``CANCELLED``: a deliberate ``scancel`` is not undone), the job passed its ``--deadline``
  (``DEADLINE``), Slurm no longer knows the job (nothing is known of how it ended), the time limit ended an
  attempt that saved no checkpoint, or Slurm ended the job out of memory (``OUT_OF_MEMORY``).

The time limit (``TIMEOUT``) gets a new allocation only when the attempt saved at least one checkpoint: the next
one then continues where this one stopped (chaining allocations under a site's maximum ``--time`` is the usual way
to train longer than it), while an attempt that saved nothing would start over and reach the same limit at the
same point, spending the budget and allocation hours for nothing. ``OUT_OF_MEMORY`` is refused for the same
reason: the new job would ask for the same memory (the launch's ``--sbatch mem=``/``mem-per-cpu=``) and run out
of it the same way; the verdict says to ask for more and resume.
"""

from __future__ import annotations

from nbtrain.backends.slurm.jobstate import SCRIPT_RAN
from nbtrain.gang.restarts import Restart, RestartDecision

__all__ = ["ALLOCATION_LOST", "Restart", "RestartDecision", "decide_restart", "restart_note"]


# Slurm ended the allocation for a reason outside the training: a new one can succeed
ALLOCATION_LOST = frozenset({"NODE_FAIL", "PREEMPTED", "BOOT_FAIL"})
# the batch script ended by itself (the supervisor exited, crashed or was killed): a failure like any other
_SCRIPT_ENDED = frozenset({"FAILED", "COMPLETED"})
# alive: the supervisor can start another step in it
_ALIVE = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING", "STOPPED",
                    "SUSPENDED"})


def decide_restart(*, job_state: str | None, node_failed: str | None, cancelled: bool, attempt: int,
                   restart_budget: int, checkpointed: bool, store_unseen: bool = False,
                   job_ended: bool = False) -> RestartDecision:
    """What follows a FAILED attempt.

    ``job_state``: Slurm's ``JobState`` of the attempt's job as last read (``RUNNING`` while it runs; None when
    Slurm no longer knows it). ``node_failed``: the node ``srun`` reported failing in this attempt's step, if any.
    ``cancelled``: the user asked nbtrain to cancel. ``attempt`` and ``restart_budget``: this attempt's number and
    the last one automatic restarts may reach (``attempt + --max-restarts`` of the launch). ``checkpointed``: this
    attempt saved at least one complete checkpoint. ``store_unseen``: the job has ended and none of what its batch
    script writes (``supervisor.log``, ``supervisor.json``, ``status.json``) is in the attempt's directory as this
    process sees it. ``job_ended``: Slurm says the job is over, whatever state it last showed (no step can start in
    it any more: a restart that would be in place gets a new allocation).
    """
    if cancelled or attempt >= restart_budget:
        return RestartDecision(Restart.NONE)
    if store_unseen and job_state in SCRIPT_RAN:
        return RestartDecision(Restart.NONE, "not restarted: the batch script's files never reached this host's "
                                             "store, so a new allocation would end the same way")
    if job_state in ALLOCATION_LOST or node_failed is not None:
        return RestartDecision(Restart.NEW_ALLOCATION)
    if job_state == "TIMEOUT":
        if checkpointed:
            return RestartDecision(Restart.NEW_ALLOCATION)
        return RestartDecision(Restart.NONE, "not restarted: the attempt saved no checkpoint, so a new allocation "
                                             "would start over and reach the same time limit")
    if job_state == "OUT_OF_MEMORY":
        return RestartDecision(Restart.NONE, "not restarted: a new allocation with the same memory request would "
                                             "run out of memory the same way; ask for more (--sbatch mem=... or "
                                             "--sbatch mem-per-cpu=...) and resume the run")
    if job_state in _ALIVE:
        return RestartDecision(Restart.NEW_ALLOCATION if job_ended else Restart.IN_PLACE)
    if job_state in _SCRIPT_ENDED:
        return RestartDecision(Restart.NEW_ALLOCATION)
    if job_state is None:
        return RestartDecision(Restart.NONE, "not restarted: Slurm no longer knows the job, so how it ended is "
                                             "unknown")
    if job_state == "CANCELLED":
        return RestartDecision(Restart.NONE, "not restarted: the job was cancelled outside nbtrain")
    return RestartDecision(Restart.NONE, f"not restarted after Slurm job state {job_state}")


def restart_note(decision: RestartDecision, *, attempt: int, restart_budget: int, job_id: str) -> str:
    """What the verdict's reason says of the decision (empty when there is nothing to say)."""
    if decision.restart is Restart.IN_PLACE:
        return (f"restarting from the last checkpoint as a new step of Slurm job {job_id} (attempt {attempt + 1} of "
                f"{restart_budget})")
    if decision.restart is Restart.NEW_ALLOCATION:
        return (f"restarting from the last checkpoint in a new Slurm allocation (attempt {attempt + 1} of "
                f"{restart_budget})")
    return decision.why_not
