"""Automatic restarts on Kubernetes (``--max-restarts``): a failed attempt is followed by a new workload.

The pods of an attempt are gone once it fails, and nothing on the cluster restarts them: the gang is static (a
replacement pod could not rejoin its rendezvous). So a new attempt is a new workload (its own names, event key and
pods) with the same spec, bundle and ``--volume``s; its ranks restore from the latest checkpoint on the volume
(``NBTRAIN_CHECKPOINT_DIR`` is the same for every attempt of a run).

Who starts it: the mirror of the failed attempt writes its verdict with ``retrying: true`` (its attempt is below the
run's restart budget and nobody cancelled). Whichever process next asks for the run's status (the kernel's watcher,
``attach``, the CLI) follows the handle forward: :func:`follow` reads each attempt's ``handle.json`` (written by
``submit``) and, at a retrying attempt without a successor, claims the restart and submits the next attempt. The
claim is an exclusive lock on ``restart.claim`` held while the restart is planned and submitted (or cancelled):
one process at a time, and a claimant that dies (a killed kernel, Ctrl-C) releases it with its descriptor, so the
next process to look starts the restart instead of the run waiting in "restarting" for ever. Under the lock the
state is read again: a successor already submitted, or a cancel recorded, ends the claim without a second start.
The run record keeps its first handle, as with the local backend, whose status also follows automatic restarts.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbtrain.backends.base import RunHandle
from nbtrain.backends.kubernetes.files import AttemptFiles
from nbtrain.errors import NbtrainError
from nbtrain.events import EventKind, EventWriter
from nbtrain.filelock import try_locked
from nbtrain.model import RunState
from nbtrain.store import write_json_atomic

if TYPE_CHECKING:
    from nbtrain.backends.kubernetes.backend import KubernetesBackend

__all__ = ["HANDLE_FILE", "cancel_restart", "follow", "write_handle"]

HANDLE_FILE = "handle.json"
CLAIM_FILE = "restart.claim"
CLAIM_WAIT_S = 60.0  # a cancel waits this long for a restart being submitted (planning and one create call)


def write_handle(root: Path, handle: RunHandle) -> None:
    """Keep ``handle``'s data in its attempt directory (what :func:`follow` reads to reach that attempt)."""
    write_json_atomic(root / HANDLE_FILE, dict(handle.data))


def _read_handle(backend: KubernetesBackend, run_id: str, attempt: int) -> RunHandle | None:
    try:
        data = json.loads((backend.store.attempt_dir(run_id, attempt) / HANDLE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return RunHandle(backend.name, run_id, data) if isinstance(data, dict) else None


def _claimed(root: Path, *, wait: bool = False) -> AbstractContextManager[bool]:
    """Hold the restart claim of the failed attempt in ``root`` (True), or False while another process holds it
    (``wait``: until it lets go, at most :data:`CLAIM_WAIT_S`).

    The lock goes with the descriptor: released on leaving, or when the holder dies (:mod:`nbtrain.filelock`).
    """
    return try_locked(root / CLAIM_FILE, wait_s=CLAIM_WAIT_S if wait else 0.0)


def _due(backend: KubernetesBackend, failed: RunHandle) -> bool:
    """Whether the restart after ``failed`` is still to be started (read under the claim: the state may have
    moved on since the caller looked: a successor submitted, a cancel or a final verdict recorded)."""
    status = AttemptFiles(backend.store.attempt_dir(failed.run_id, failed.attempt)).read_status() or {}
    return bool(status.get("retrying")) and _read_handle(backend, failed.run_id, failed.attempt + 1) is None


def _restart(backend: KubernetesBackend, failed: RunHandle) -> RunHandle | None:
    """Plan and submit the attempt after ``failed`` (same spec, bundle and budget); None when another process
    holds the claim or the restart is no longer due. A restart that cannot be planned or submitted is recorded as
    the failed attempt's final verdict."""
    root = backend.store.attempt_dir(failed.run_id, failed.attempt)
    with _claimed(root) as mine:
        if not mine or not _due(backend, failed):
            return None
        return _submit_next(backend, failed, root)


def _submit_next(backend: KubernetesBackend, failed: RunHandle, root: Path) -> RunHandle | None:
    attempt = failed.attempt + 1
    try:
        record = backend.store.load(failed.run_id)
        bundle_dir = backend.store.bundles / record.bundle_digest
        if not bundle_dir.is_dir():
            raise NbtrainError(f"the bundle {record.bundle_digest[:12]} of run {failed.run_id} is gone from "
                               f"{backend.store.bundles}; run its cell again with --resume {failed.run_id}")
        plan = backend.plan_restart(record.spec, str(bundle_dir), record.bundle_digest, failed.run_id,
                                    attempt=attempt, restart_budget=int(failed.data.get("restart_budget", attempt)))
        return backend.submit(plan)
    except Exception as error:  # noqa: BLE001 - whatever stops the restart becomes the run's verdict, never a hang
        files = AttemptFiles(root)
        status = files.read_status() or {}
        failure = dict(status.get("failure") or {"reason": "the attempt failed"})
        failure["reason"] = f"{failure.get('reason')}; the automatic restart (attempt {attempt}) failed: {error}"
        out = EventWriter(files.events_dir / "restart.jsonl", "kubernetes-restart", attempt=failed.attempt)
        out.emit(EventKind.FAILURE, **failure)
        out.emit(EventKind.STATE, state=RunState.FAILED.value, reason=failure["reason"])
        files.write_status({**status, "retrying": False, "failure": failure})
        return None


def follow(backend: KubernetesBackend, handle: RunHandle, *, start: bool = True) -> RunHandle:
    """The handle of the latest attempt that ``handle``'s attempt led to through automatic restarts, starting the
    next one when an attempt failed with ``retrying`` and none follows it yet (see the module docstring; ``start``
    False: never start one)."""
    current = handle
    while True:
        status: dict[str, Any] | None = AttemptFiles(backend.store.attempt_dir(current.run_id, current.attempt)) \
            .read_status()
        if not status or not status.get("retrying"):
            return current
        following = _read_handle(backend, current.run_id, current.attempt + 1)
        if following is None and start:
            following = _restart(backend, current)
        if following is None:
            return current  # another process is starting it (status says "restarting"), or it could not start
        current = following


def cancel_restart(backend: KubernetesBackend, handle: RunHandle) -> bool:
    """Cancel a restart that is due but not started (the latest attempt failed with ``retrying`` and has no
    successor): claim it so no process starts it, and record the attempt as CANCELLED. False when there is none."""
    latest = follow(backend, handle, start=False)
    root = backend.store.attempt_dir(latest.run_id, latest.attempt)
    files = AttemptFiles(root)
    if not _due(backend, latest):
        return False
    with _claimed(root, wait=True) as mine:  # a restart being submitted now: wait for it, then cancel that one
        if not mine or not _due(backend, latest):
            return False  # it was started: cancelling the new attempt is the caller's next step
        status = files.read_status() or {}
        reason = "cancelled by the user while restarting"
        EventWriter(files.events_dir / "restart.jsonl", "kubernetes-restart", attempt=latest.attempt).emit(
            EventKind.STATE, state=RunState.CANCELLED.value, reason=reason)
        files.write_status({**status, "state": RunState.CANCELLED.value, "retrying": False, "detail": reason})
        return True
