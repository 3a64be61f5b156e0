"""The files of one attempt directory that the gang engine and the backends share (``runs/<id>/attempts/<n>/``)::

    plan.json            the attempt's request (GangRequest.to_json), written by ``submit`` (0600), read by its
                         supervisor
    accelerate.yaml      the generated Accelerate config the launchers read (0600; path in the request)
    status.json          the supervisor's state and verdict (only the engine writes it, replaced atomically)
    cancel.request       exists once the user asked to cancel (created empty, 0600; never removed)
    supervisor.log       the supervisor's own output (appended)
    events/              one JSONL file per source (rank-R.jsonl by the ranks, supervisor.jsonl by the engine)
    logs/                rank-R.log (each rank's output), node-N.log (each local launcher's)
    tmp/                 the launchers' TMPDIR, removed after the attempt

Engine-specific files sit beside them (Slurm: ``slurm.json``, ``srun.log``, ``supervisor.json``; Kubernetes:
:mod:`nbtrain.backends.kubernetes.files`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nbtrain.store import private_dir, write_json_atomic

if TYPE_CHECKING:
    from nbtrain.gang.request import GangRequest

__all__ = ["CANCEL_REQUEST", "PLAN", "RESULT", "STATUS", "SUPERVISOR_LOG", "AttemptLayout", "request_cancel",
           "write_attempt_files"]

PLAN = "plan.json"
STATUS = "status.json"
CANCEL_REQUEST = "cancel.request"
SUPERVISOR_LOG = "supervisor.log"
RESULT = "result.pkl"


@dataclass(frozen=True)
class AttemptLayout:
    """The paths of one attempt directory (drawn in the module docstring); pure, creates nothing."""

    root: Path

    @property
    def plan(self) -> Path:
        """``plan.json``: the request (written by ``submit``, read by the supervisor)."""
        return self.root / PLAN

    @property
    def status(self) -> Path:
        """``status.json``: the supervisor's state and verdict."""
        return self.root / STATUS

    @property
    def cancel_request(self) -> Path:
        """``cancel.request``: present once the user asked to cancel."""
        return self.root / CANCEL_REQUEST

    @property
    def supervisor_log(self) -> Path:
        """``supervisor.log``: the supervisor's own output."""
        return self.root / SUPERVISOR_LOG

    @property
    def result(self) -> Path:
        """``result.pkl``: rank 0's pickled result."""
        return self.root / RESULT

    @property
    def events(self) -> Path:
        """``events/``: one JSONL file per source."""
        return self.root / "events"

    @property
    def logs(self) -> Path:
        """``logs/``: each rank's and each local launcher's output."""
        return self.root / "logs"

    @property
    def tmp(self) -> Path:
        """``tmp/``: the launchers' TMPDIR."""
        return self.root / "tmp"


def write_attempt_files(request: GangRequest) -> Path:
    """Write what an attempt's supervisor and launchers read: plan.json (``request.to_json()``, the request type's
    own: a Slurm request writes its extra fields) and the generated Accelerate config.

    Returns the attempt directory (created private).
    """
    attempt_dir = private_dir(Path(request.attempt_dir))  # the store is private (nbtrain.store)
    config = request.accelerate_config
    with open(os.open(config.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as handle:
        handle.write(config.text)
    write_json_atomic(AttemptLayout(attempt_dir).plan, request.to_json())
    return attempt_dir


def request_cancel(attempt_dir: Path) -> None:
    """Create ``cancel.request`` in ``attempt_dir`` (idempotent): the supervisor reads it as the user's cancel."""
    os.close(os.open(AttemptLayout(attempt_dir).cancel_request, os.O_WRONLY | os.O_CREAT, 0o600))
