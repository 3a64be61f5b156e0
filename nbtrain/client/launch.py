"""One launch path for a new run (submit, rerun) and a new attempt of a run (resume).

Order, always: plan (every check; nothing runs), record, submit, keep the handle ``submit`` returned,
then start the run's MLflow tracking agent (a detached process beside the run: tracking does not depend
on anyone watching). A failure up to the submit leaves the store as it was: no pending run, no
half-recorded attempt.
"""

from __future__ import annotations

import copy
import os
import shutil
import time
from pathlib import Path
from typing import Any

from nbtrain import envreport
from nbtrain.backends import get_backend
from nbtrain.backends.base import Backend, Plan, RunHandle
from nbtrain.errors import NbtrainError
from nbtrain.model import RunState
from nbtrain.spec import JobSpec
from nbtrain.store import RunRecord, Store

__all__ = ["bundle_dir_of", "next_attempt", "plan_new", "start_attempt", "start_new_run"]


def bundle_dir_of(store: Store, digest: str, run_id: str) -> Path:
    """The stored bundle ``digest``; NbtrainError naming the run when it is gone."""
    path = store.bundles / digest
    if not path.is_dir():
        raise NbtrainError(f"the bundle {digest[:12]} of run {run_id} is gone from {store.bundles}; run its cell "
                           "again (with --resume RUN to continue the same run).")
    return path


def plan_new(store: Store, backend: Backend, spec: JobSpec, digest: str, run_id: str) -> Plan:
    """Plan attempt 0 of ``run_id`` (reserved by the caller); the reserved directory goes if planning fails."""
    try:
        return backend.plan(spec, str(bundle_dir_of(store, digest, run_id)), digest, run_id, attempt=0)
    except BaseException:
        _remove_empty(store.run_dir(run_id))
        raise


def start_new_run(store: Store, backend: Backend, plan: Plan, *, kind: str, notebook: dict[str, Any] | None = None,
                  attempt_info: dict[str, Any] | None = None, profile: str | None = None) -> RunRecord:
    """Record and submit attempt 0 of ``plan``; on a refused submit the run's directory is removed again."""
    record = RunRecord(run_id=plan.run_id, spec=plan.spec, bundle_digest=plan.bundle_digest, backend=backend.name,
                       kind=kind, notebook=dict(notebook or {}), profile=profile)
    record.attempts.append({"attempt": 0, "submitted": time.time(), **(attempt_info or {})})
    store.save(record)
    try:
        handle = backend.submit(plan)
    except BaseException:
        # nothing started (403, 409, no kubeconfig, ...): leave no "pending" run behind
        shutil.rmtree(store.run_dir(plan.run_id), ignore_errors=True)
        raise
    record.handle = dict(handle.data)
    store.save(record)
    _start_tracking_agent(store, record)
    try:  # for `nbtrain env-diff`: the submitter's versions and packages, while the gang starts
        envreport.record(store.run_dir(plan.run_id))
    except OSError:
        pass  # env-diff then compares with the process running it
    return record


def next_attempt(record: RunRecord, seen: int) -> int:
    """The number of the next attempt of ``record`` (``seen``: the highest attempt the caller has seen)."""
    return max(seen, record.latest_attempt) + 1


def start_attempt(store: Store, backend: Backend, record: RunRecord, plan: Plan, *, kind: str) -> RunHandle:
    """Record and submit a new attempt of an existing run; returns the handle the run keeps from now on.

    If the backend refuses, the record is restored as it was and the attempt's directory, which a backend writes
    into before it submits (Slurm's batch script, Kubernetes' event key), is removed again: the attempt never existed
    (a backend that reads attempts from the store would otherwise see an attempt with no job, and the next resume
    would skip its number).
    """
    attempt_dir = store.attempt_dir(record.run_id, plan.attempt)
    existed = attempt_dir.exists()
    before = copy.deepcopy(record.__dict__)
    record.attempts.append({"attempt": plan.attempt, "submitted": time.time(), "kind": kind,
                            "bundle_digest": plan.bundle_digest})
    record.bundle_digest = plan.bundle_digest
    record.state = RunState.PENDING.value
    record.failure = None
    record.ended = None
    store.save(record)
    try:
        handle = backend.submit(plan)
    except BaseException:
        if not existed:
            shutil.rmtree(attempt_dir, ignore_errors=True)
        record.__dict__.update(before)
        store.save(record)
        raise
    record.handle = dict(handle.data)
    store.save(record)
    _start_tracking_agent(store, record)  # after the save: an agent finishing the last attempt sees this one
    return handle


def _start_tracking_agent(store: Store, record: RunRecord) -> None:
    """Start the run's tracking agent (tracking on); never fails the launch: the gang runs already.

    A failure to start it is not lost: ``Run._start_tracking``, which follows every client launch, tries
    again and shows why as a run notice.
    """
    from nbtrain.tracking.starter import ensure_agent  # stdlib only; mlflow is imported by the agent

    try:
        pid = ensure_agent(store, record)
    except Exception:  # noqa: BLE001 - see the docstring
        return
    if pid is not None:
        _lower_priority(pid)


#: How much less CPU priority (nice) the tracking agent gets than the process that launched the run. The agent
#: imports MLflow and opens its run (seconds of CPU, as much as a rank's start-up) exactly while the launchers
#: and ranks import torch and Accelerate: on a machine with few cores that CPU comes off the gang's way to its
#: first step. At a lower priority it still gets every idle cycle and catches up as soon as the gang computes or
#: waits; nothing is lost (it forwards from the run's event files).
AGENT_NICE_INCREMENT = 5


def _lower_priority(pid: int) -> None:
    """Lower process ``pid``'s CPU priority by :data:`AGENT_NICE_INCREMENT`; best effort (never fails the launch).

    On Linux with autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``) CPU is shared between
    sessions first and a process's nice only ranks it inside its own session; the agent leads a session of its
    own, so the session's nice (``/proc/PID/autogroup``) is lowered as well.
    """
    try:
        nice = min(19, os.getpriority(os.PRIO_PROCESS, 0) + AGENT_NICE_INCREMENT)
        os.setpriority(os.PRIO_PROCESS, pid, nice)
    except (OSError, AttributeError):  # not POSIX, or the agent is gone already
        return
    try:
        with open(f"/proc/{pid}/autogroup", "w", encoding="ascii") as handle:
            handle.write(str(nice))
    except OSError:
        pass  # no autogroups (not Linux, or disabled): the process nice above is what counts


def backend_for(record: RunRecord, store: Store) -> Backend:
    """A backend instance for ``record``'s backend on ``store``."""
    return get_backend(record.backend, store=store)


def _remove_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass
