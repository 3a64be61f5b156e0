"""The Backend contract every engine implements (local processes, Kubernetes, later Slurm/Ray).

Shape borrowed from TorchX: a pure, printable dry run (:meth:`Backend.plan`) that returns the backend's
own request, and thin I/O methods around it. The same contract test-suite runs on every backend.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from nbtrain.events import Event
from nbtrain.spec import JobSpec

__all__ = ["Backend", "Batch", "Failure", "LogLine", "Plan", "RunCursor", "RunHandle", "RunState", "RunStatus"]


class RunState(str, enum.Enum):
    """Lifecycle of a run. Terminal states never change again."""

    PENDING = "pending"  # recorded, not yet launched
    QUEUED = "queued"  # waiting for admission (Kueue) or scheduling
    STARTING = "starting"  # processes/pods starting, no rank has reported yet
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """True for SUCCEEDED, FAILED and CANCELLED."""
        return self in (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED)


@dataclass(frozen=True)
class Failure:
    """The first failing rank of a run and why. ``rank`` is None when no rank can be blamed."""

    reason: str
    rank: int | None = None
    node: int | None = None
    exit_code: int | None = None
    signal: str | None = None
    exc_type: str | None = None
    message: str | None = None
    traceback: str | None = None
    last_lines: tuple[str, ...] = ()
    cell_line: int | None = None
    time: float | None = None

    def summary(self) -> str:
        """One line: 'rank 3 (node 1) failed: ValueError: boom (cell line 4)'."""
        who = f"rank {self.rank}" if self.rank is not None else "the gang"
        if self.node is not None:
            who += f" (node {self.node})"
        what = self.reason
        if self.exc_type:
            what = f"{self.exc_type}: {self.message or ''}".strip()
        elif self.signal:
            what = f"killed by {self.signal}" + (f" — {self.reason}" if self.reason else "")
        elif self.exit_code is not None:
            what = f"exit code {self.exit_code}" + (f" — {self.reason}" if self.reason else "")
        where = f" (cell line {self.cell_line})" if self.cell_line else ""
        return f"{who} failed: {what}{where}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Failure:
        """Inverse of :meth:`to_dict` (unknown keys ignored)."""
        known = set(cls.__dataclass_fields__)
        values = {k: v for k, v in data.items() if k in known}
        values["last_lines"] = tuple(values.get("last_lines") or ())
        return cls(**values)


@dataclass(frozen=True)
class RunStatus:
    """A snapshot of a run as the backend sees it."""

    state: RunState
    attempt: int = 0
    started: float | None = None
    ended: float | None = None
    failure: Failure | None = None
    detail: str = ""


@dataclass(frozen=True)
class RunHandle:
    """What a backend needs to find a run again (saved in the RunRecord; survives kernel restarts)."""

    backend: str
    run_id: str
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """A dry run: everything ``submit`` will do, printable, with no side effect yet.

    ``request`` is the backend's own request object (local: one command line per node; Kubernetes:
    the manifests). ``notices`` are one-time facts the user should see (e.g. "no GPU: CPU/gloo").
    """

    backend: str
    run_id: str
    spec: JobSpec
    bundle_digest: str
    bundle_dir: str
    request: Mapping[str, Any]
    notices: tuple[str, ...] = ()

    def render(self) -> str:
        """Human-readable plan (what ``--dry-run`` prints after the capture report)."""
        lines = [
            f"backend:   {self.backend}",
            f"run id:    {self.run_id} (not submitted)",
            f"gang:      {self.spec.nodes} node(s) x {self.spec.procs} process(es) = world size {self.spec.world_size}",
            f"bundle:    {self.bundle_digest[:16]} at {self.bundle_dir}",
        ]
        lines += [f"note:      {n}" for n in self.notices]
        describe = self.request.get("describe")
        if isinstance(describe, str):
            lines.append(describe)
        return "\n".join(lines)


@dataclass(frozen=True)
class LogLine:
    """One line of output attributed to a global rank (``rank`` None: a launcher/node line)."""

    rank: int | None
    text: str
    attempt: int = 0
    node: int | None = None


@dataclass(frozen=True)
class Batch:
    """What a cursor found since its previous poll."""

    events: tuple[Event, ...] = ()
    lines: tuple[LogLine, ...] = ()


class RunCursor(Protocol):
    """An incremental reader over one run's events and log lines, from the start of the first attempt.

    Each event and each line is returned by exactly one ``poll`` (the cursor keeps its position),
    so a watcher that polls until the run is terminal sees everything exactly once.
    """

    def poll(self, *, max_lines: int = 50_000) -> Batch:
        """Everything new since the previous poll (non-blocking)."""
        ...


class Backend(Protocol):
    """A place where gangs run. Every method is safe to call from any thread."""

    name: str

    def plan(self, spec: JobSpec, bundle_dir: str, bundle_digest: str, run_id: str) -> Plan:
        """Pure dry run: validate ``spec`` against this backend and describe the launch.

        Raises SpecError/EnvironmentProblem for what cannot run here (e.g. more GPUs than exist).
        Starts nothing, writes nothing.
        """
        ...

    def submit(self, plan: Plan) -> RunHandle:
        """Start the gang described by ``plan`` and return at once (does not wait for ranks)."""
        ...

    def status(self, handle: RunHandle) -> RunStatus:
        """Current state. A run whose controller vanished without a verdict reports FAILED with the reason."""
        ...

    def events(self, handle: RunHandle, *, follow: bool = False, poll_s: float = 0.2) -> Iterator[Event]:
        """Every event of the run in per-source order, each exactly once.

        - ``follow=False``: what exists now, then stop.
        - ``follow=True``: keep yielding until the run is terminal and everything is read.
        """
        ...

    def logs(self, handle: RunHandle, rank: int, *, tail: int | None = None, attempt: int | None = None) -> list[str]:
        """Lines of one global rank's output (stdout and stderr), oldest first; ``tail`` keeps the last N.

        ``attempt`` None means the latest attempt. Unknown rank: [] (the rank may not have started).
        """
        ...

    def cursor(self, handle: RunHandle) -> RunCursor:
        """A fresh cursor positioned at the beginning of the run (backfill, then follow)."""
        ...

    def cancel(self, handle: RunHandle) -> None:
        """End every process/pod of the run. Idempotent; cancelling a finished run does nothing."""
        ...

    def list(self) -> list[RunHandle]:
        """Every run this backend knows of, newest first."""
        ...
