"""Slurm's job records and states, as nbtrain reads them (pure).

``scontrol show job -o`` prints one line per job of ``Key=Value`` words; :func:`parse_jobs` reads them (values
may contain spaces only in the trailing fields nbtrain does not read). :func:`queued_detail` says why a job waits
and where it stands in its partition; :func:`slurm_verdict` turns a job that ended without nbtrain's verdict
(the time limit, a failed node, preemption, memory, a killed supervisor) into a clear FAILED or CANCELLED.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from nbtrain.model import Failure, RunState

__all__ = ["ACTIVE", "PENDING_STATES", "SCRIPT_RAN", "TERMINAL", "JobInfo", "parse_jobs", "queued_detail",
           "slurm_verdict", "unshared_store_reason"]

PENDING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED"})
ACTIVE = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING", "STOPPED"})
TERMINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                      "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED"})
# ended states in which the batch script was started on a node (so its --output file, supervisor.log, was opened
# there): a job cancelled or past its deadline while queued, or whose node failed before the script ran, has none
SCRIPT_RAN = frozenset({"COMPLETED", "FAILED", "OUT_OF_MEMORY", "TIMEOUT"})


@dataclass(frozen=True)
class JobInfo:
    """One Slurm job as ``scontrol show job -o`` describes it (only what nbtrain reads)."""

    job_id: str
    state: str
    reason: str = "None"
    partition: str = ""
    priority: int = 0
    submit_time: str = ""
    exit_code: str = "0:0"
    time_limit: str = ""
    nodes: str = ""
    batch_host: str = ""

    @property
    def pending(self) -> bool:
        """Waiting in the queue (or held)."""
        return self.state in PENDING_STATES

    @property
    def ended(self) -> bool:
        """Slurm considers the job over (every process of it is gone, or being cleaned up after a failure)."""
        return self.state in TERMINAL


def _fields(line: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for word in line.split():
        key, sep, value = word.partition("=")
        if sep and key not in out:
            out[key] = value
    return out


def parse_jobs(text: str) -> dict[str, JobInfo]:
    """Every job of an ``scontrol show job -o`` output, by job id (array and het jobs: by their own JobId)."""
    jobs: dict[str, JobInfo] = {}
    for line in text.splitlines():
        f = _fields(line)
        if "JobId" not in f or "JobState" not in f:
            continue
        try:
            priority = int(f.get("Priority", "0"))
        except ValueError:
            priority = 0
        jobs[f["JobId"]] = JobInfo(
            job_id=f["JobId"], state=f["JobState"], reason=f.get("Reason", "None"), partition=f.get("Partition", ""),
            priority=priority, submit_time=f.get("SubmitTime", ""), exit_code=f.get("ExitCode", "0:0"),
            time_limit=f.get("TimeLimit", ""), nodes=f.get("NodeList", ""), batch_host=f.get("BatchHost", ""),
        )
    return jobs


def queue_position(job: JobInfo, jobs: Iterable[JobInfo]) -> int:
    """1-based place of pending ``job`` among the pending jobs of its partition (higher priority, then older first)."""
    def order(j: JobInfo) -> tuple[int, str, int]:
        return (-j.priority, j.submit_time, int(j.job_id) if j.job_id.isdigit() else 0)
    ahead = [j for j in jobs if j.pending and j.partition == job.partition and order(j) < order(job)]
    return len(ahead) + 1


def queued_detail(job: JobInfo, jobs: Mapping[str, JobInfo]) -> str:
    """What a queued run shows: ``queued: Resources (position 3)`` (Slurm's own reason word)."""
    reason = job.reason if job.reason not in ("", "None", "(null)") else "waiting to be scheduled"
    where = f" in partition {job.partition}" if job.partition else ""
    return f"queued: {reason} (position {queue_position(job, jobs.values())}{where}, Slurm job {job.job_id})"


def unshared_store_reason(job: JobInfo, job_id: str, store_root: str) -> str:
    """Why a job whose batch script ran left nothing in the store as this host sees it, and the fix."""
    return (f"Slurm job {job_id} ended ({job.state}, exit code {job.exit_code}) and nothing its batch script writes "
            f"(supervisor.log, supervisor.json, status.json) reached the attempt directory on this host: the store "
            f"does not look shared with the nodes (NBTRAIN_HOME={store_root} on this host); run `nbtrain doctor "
            f"--backend slurm` and put NBTRAIN_HOME on a filesystem every node mounts at the same path "
            f"(docs/slurm.md, \"Set-up on a real cluster\")")


def slurm_verdict(job: JobInfo | None, job_id: str, *, cancel_requested: bool, supervisor_log: str,
                  unshared_store: str | None = None) -> tuple[RunState, Failure | None]:
    """The verdict of a run whose Slurm job ended (or vanished) without one from nbtrain's supervisor.

    ``unshared_store``: the store's root (``NBTRAIN_HOME``) when nothing the batch script writes reached this
    host's view of the attempt directory; for a job whose script ran (:data:`SCRIPT_RAN`) the verdict then says
    the store does not look shared with the nodes, instead of guessing at a kill.
    """
    if job is None:
        return RunState.FAILED, Failure(reason=f"Slurm no longer knows job {job_id} and nbtrain's supervisor left no "
                                               f"verdict (the job was purged, or the controller lost it); see "
                                               f"{supervisor_log}")
    state = job.state
    if cancel_requested:
        return RunState.CANCELLED, None
    if unshared_store is not None and state in SCRIPT_RAN:
        reason = unshared_store_reason(job, job_id, unshared_store)
    elif state == "TIMEOUT":
        reason = (f"Slurm ended job {job_id} at its time limit ({job.time_limit}, --time): TIMEOUT; ask for more with "
                  "--time, or save checkpoints and resume the run")
    elif state == "NODE_FAIL":
        reason = (f"a node of Slurm job {job_id} failed (NODE_FAIL, nodes {job.nodes}); resume the run from its last "
                  "checkpoint, or exclude the node with --sbatch exclude=NODE")
    elif state == "PREEMPTED":
        reason = (f"Slurm preempted job {job_id} (PREEMPTED) for a higher-priority job; resume the run, or use a "
                  "--qos/--partition without preemption")
    elif state == "OUT_OF_MEMORY":
        reason = (f"Slurm job {job_id} ran out of memory (OUT_OF_MEMORY); ask for more with --sbatch mem-per-cpu=... "
                  "or --sbatch mem=..., or lower the batch size")
    elif state == "BOOT_FAIL":
        reason = f"a node of Slurm job {job_id} failed to boot (BOOT_FAIL); resume the run"
    elif state == "DEADLINE":
        reason = f"Slurm job {job_id} reached its deadline (DEADLINE)"
    elif state == "CANCELLED":
        reason = (f"Slurm job {job_id} was cancelled outside nbtrain (scancel by you or an administrator, "
                  "CANCELLED)")
    else:
        reason = (f"the nbtrain supervisor of Slurm job {job_id} ended without a verdict (job {state}, exit code "
                  f"{job.exit_code}: killed, or out of memory); see {supervisor_log}")
    return RunState.FAILED, Failure(reason=reason)
