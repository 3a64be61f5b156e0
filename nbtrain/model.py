"""Run-level types every layer shares (pure; bottom layer next to ``events.py``).

- :class:`RunState`, :class:`Failure`, :class:`RunStatus`: what a backend reports about a run;
- :class:`LogLine`, :class:`Batch`, :class:`LogPage`: what cursors and paged reads return;
- :class:`RunSnapshot`: one immutable picture of a run for readers (widget, tracking, server, CLI);
- :class:`RunSummary`: the one wire model of a run for ``--json``, the REST API and ``%nbtrain runs``
  (its JSON Schema is ``nbtrain/schemas/run-summary.schema.json``, checked by the Python and TypeScript tests).

Nothing here imports anything from nbtrain but ``events``.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nbtrain.events import Event

__all__ = ["Batch", "Failure", "LogLine", "LogPage", "RunSnapshot", "RunState", "RunStatus", "RunSummary",
           "WarmFacts", "is_terminal", "json_safe"]


class RunState(str, enum.Enum):
    """Lifecycle of a run. Terminal states never change again."""

    PENDING = "pending"  # recorded, not yet launched
    QUEUED = "queued"  # waiting for admission (Kueue) or scheduling
    STARTING = "starting"  # processes/pods starting, no rank has reported yet
    RUNNING = "running"
    #: running, but no progress for --stall-after seconds (ranks stuck, e.g. in a collective): see RunStatus.stalled
    #: and the snapshot's detail. Only a backend's live answer says it; the run's events keep RUNNING.
    STALLED = "stalled"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """True for SUCCEEDED, FAILED and CANCELLED: the one list of terminal states (:func:`is_terminal`)."""
        return self in (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED)


def is_terminal(state: str) -> bool:
    """Whether ``state`` (a :class:`RunState`, or its value as record.json and status files keep it) is terminal;
    an empty or unknown value is not."""
    try:
        return RunState(state).terminal
    except ValueError:
        return False


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
    diagnosis: str | None = None  # what nbtrain concluded beyond the rank's own error (e.g. desynchronised collectives)

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
        why = f" — {self.diagnosis}" if self.diagnosis else ""
        return f"{who} failed: {what}{where}{why}"

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
    stalled: tuple[int, ...] = ()  # STALLED: the global ranks judged stuck (sorted)


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


@dataclass(frozen=True)
class LogPage:
    """A page of one rank's log: ``lines[i]`` is line number ``start + i`` (0-based, oldest first).

    ``total`` is the number of lines in the log when it was read (None when counting was not needed:
    a page read from the end of a very large log). ``start`` is absolute when ``total`` is known; for a
    read from the end without a count it is negative (lines from the end).
    """

    lines: tuple[str, ...] = ()
    start: int = 0
    total: int | None = None

    @property
    def end(self) -> int:
        """``start + len(lines)``: where the next page starts."""
        return self.start + len(self.lines)


DETAIL_MAX = 500  # characters of RunSummary.detail (one line in a panel row)


@dataclass(frozen=True)
class WarmFacts:
    """The warm gang a ``--warm`` run's current attempt runs on: ``gang`` and ``generation`` once its ranks were
    forked ("" and 0 before), and why that generation was recycled ("" unless it was: a failure, a cancel, leaked
    processes; see :mod:`nbtrain.warm.recycle`)."""

    gang: str = ""
    generation: int = 0
    recycled: str = ""


@dataclass(frozen=True)
class RunSnapshot:
    """An immutable picture of a run at one moment (what readers get instead of the Run's insides)."""

    run_id: str
    name: str
    backend: str
    state: RunState
    attempt: int
    nodes: int
    procs: int
    world_size: int
    created: float
    started: float | None = None
    ended: float | None = None
    step: int | None = None
    total: int | None = None
    failure: Failure | None = None
    can_resume: bool = False
    notices: tuple[str, ...] = ()
    last_metrics: Mapping[str, float] = field(default_factory=dict)
    detail: str = ""
    warm: WarmFacts | None = None  # None: a cold run

    def summary(self, *, notebook: str | None = None, tracking_url: str | None = None,
                now: float | None = None) -> RunSummary:
        """The wire model of this snapshot (``notebook`` and ``tracking_url`` come from the record and tracking)."""
        started = self.started if self.started is not None and math.isfinite(self.started) else self.created
        ended = self.ended if self.state.terminal and self.ended is not None and math.isfinite(self.ended) else None
        clock = time.time() if now is None else now
        return RunSummary(
            id=self.run_id, name=self.name, state=self.state.value, backend=self.backend, nodes=self.nodes,
            procs=self.procs, world_size=self.world_size, created=self.created, started=started, ended=ended,
            duration=max(0.0, (ended or clock) - started), attempt=self.attempt, step=self.step, total=self.total,
            failure=self.failure.summary() if self.failure else None,
            failed_rank=self.failure.rank if self.failure else None,
            notebook=notebook, tracking_url=tracking_url,
            attach_code=f"import nbtrain\nrun = nbtrain.attach({self.run_id!r})\nrun.show()",
            can_resume=self.can_resume,
            detail=(self.detail.strip()[:DETAIL_MAX] or None) if not self.state.terminal else None,
        )


@dataclass(frozen=True)
class RunSummary:
    """One run on the wire: a row of ``GET /nbtrain/runs`` and of each SSE message, ``nbtrain runs --json``.

    Field names and types are fixed by ``nbtrain/schemas/run-summary.schema.json`` (checked by the Python
    tests and by the TypeScript parser's tests against the same fixtures); add fields there first.
    Times are epoch seconds; ``duration`` runs to the sender's clock for live runs.
    """

    id: str
    name: str
    state: str
    backend: str
    nodes: int
    procs: int
    world_size: int
    created: float
    started: float | None
    ended: float | None
    duration: float
    attempt: int
    step: int | None
    total: int | None
    failure: str | None
    failed_rank: int | None
    notebook: str | None
    tracking_url: str | None
    attach_code: str
    can_resume: bool
    #: What the backend says the run is doing now, while it is active (e.g. Slurm's "queued: Resources (position 2
    #: of 3)", Kubernetes' "waiting: ImagePullBackOff", a stall); None when there is nothing to say or it ended.
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict (no NaN/Infinity: such numbers become null)."""
        return dict(json_safe(dict(self.__dict__)))


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (strict JSON has no NaN or Infinity)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
