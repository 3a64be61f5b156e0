"""The small read interface of a run: what the widget, MLflow forwarding, the server and the CLI may use.

:class:`~nbtrain.client.Run` implements it; readers type their argument as :class:`RunReader` (or a protocol
that extends it with what one reader needs, e.g. :class:`TrackedRun`), never reach into the Run's record,
store, backend or view, so a reader can be fed by anything that can answer these few questions (a test double,
a remote run). ``tests/unit/test_reader_boundary.py`` holds the readers to it.

Threads: readers fed by :meth:`RunReader.subscribe` are called on the run's watcher thread while it reads;
there they use ``snapshot(refresh=False)`` (no I/O, no nested read) and never print.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from nbtrain.model import Batch, LogPage, RunSnapshot, RunState

if TYPE_CHECKING:
    from nbtrain.backends.base import RunCursor
    from nbtrain.spec import JobSpec

__all__ = ["FollowedRun", "RunFacts", "RunReader", "TrackedRun"]


@dataclass(frozen=True)
class RunFacts:
    """What a run's record says beyond a snapshot, as the handle last read or saved it (a copy; no I/O)."""

    run_id: str
    backend: str
    bundle_digest: str  #: the current attempt's bundle
    created: float
    #: where the run was submitted from: the notebook's ``path`` and ``cell_id``, or the job directory (``job_dir``)
    submitted_from: Mapping[str, Any]
    tracking_run_id: str | None  #: the MLflow run id once linked (the tracking ledger may know it first)


class RunReader(Protocol):
    """Read access to one run."""

    @property
    def id(self) -> str:
        """The run id."""
        ...

    @property
    def spec(self) -> JobSpec:
        """The JobSpec the run was submitted with."""
        ...

    @property
    def notebook(self) -> str | None:
        """The path of the notebook the run was submitted from (None when unknown)."""
        ...

    def facts(self) -> RunFacts:
        """The record's facts (identity, bundle, origin, MLflow run id) as this handle knows them; no I/O."""
        ...

    def snapshot(self, *, refresh: bool = True) -> RunSnapshot:
        """An immutable picture of the run now.

        ``refresh=False``: without asking the backend or reading anything new (what listeners must use).
        """
        ...

    def tracking_url(self) -> str | None:
        """The run's "Open in MLflow" link, or None (not tracked yet, a tracking store without a web UI)."""
        ...

    def cursor(self) -> RunCursor:
        """A fresh cursor over every event and log line, from the beginning."""
        ...

    def log_page(self, rank: int, start: int, limit: int, *, attempt: int | None = None) -> LogPage:
        """A page of one rank's log (negative ``start``: from the end); ``attempt`` None: the current one.

        Raises ValueError for a rank the run does not have.
        """
        ...

    def notice(self, message: str) -> None:
        """Show ``message`` among the run's notices in this process (once; callable from any thread)."""
        ...

    def subscribe(self, listener: Callable[[Batch], None], *, lines: bool = True) -> None:
        """Call ``listener`` from the run's watcher thread with everything new."""
        ...


class TrackedRun(RunReader, Protocol):
    """What MLflow forwarding (:mod:`nbtrain.tracking`) needs beyond reading: files where the store keeps them,
    the logs of backends without a shared disk, and one write (the MLflow run id, into the run's record)."""

    def run_dir(self) -> Path:
        """The run's directory in the store (the tracking ledger and the forwarding lock live there)."""
        ...

    def bundle_dir(self) -> Path:
        """The directory of the current attempt's bundle (may be gone)."""
        ...

    def log_file(self, rank: int, attempt: int) -> Path:
        """Where the store keeps ``rank``'s log of ``attempt`` (absent on backends without a shared disk)."""
        ...

    def logs(self, rank: int = 0, *, tail: int | None = None, attempt: int | None = None) -> str:
        """``rank``'s whole log of ``attempt`` (None: the current one) as the backend serves it."""
        ...

    def link_tracking(self, mlflow_run_id: str) -> None:
        """Keep ``mlflow_run_id`` in the run's record, on disk as it is now (another process may have saved it)."""
        ...


class FollowedRun(TrackedRun, Protocol):
    """What the run's tracking agent (:mod:`nbtrain.tracking.agent`) needs to follow a run in its own process, on its
    own thread, beyond forwarding: the state, reading what is new, and letting the backend's work in this process end.
    The client builds it (``nbtrain.client.agent``); tracking never builds a run."""

    def status(self) -> RunState:
        """The run's state now (asks the backend; a terminal verdict is recorded on the way)."""
        ...

    def sync(self, *, with_lines: bool = False) -> Batch:
        """Read what is new from the backend and hand it to the listeners (on the caller's thread)."""
        ...

    def subscribe(self, listener: Callable[[Batch], None], *, lines: bool = True, watch: bool = True) -> None:
        """Call ``listener`` with everything new; ``watch=False``: from this handle's own reads (:meth:`sync`)."""
        ...

    def release(self, timeout_s: float = 10.0) -> None:
        """Stop following the run in this process, and the backend's background work here (log mirrors) within
        ``timeout_s``; the run goes on (another process takes its following over)."""
        ...

