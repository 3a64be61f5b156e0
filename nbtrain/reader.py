"""The small read interface of a run: what the widget, MLflow forwarding, the server and the CLI may use.

:class:`~nbtrain.client.Run` implements it; readers type their argument as :class:`RunReader`, never reach
into the Run's record, store, backend or view, so a reader can be fed by anything that can answer these
few questions (a test double, a remote run).

Threads: readers fed by :meth:`RunReader.subscribe` are called on the run's watcher thread while it reads;
there they use ``snapshot(refresh=False)`` (no I/O, no nested read) and never print.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from nbtrain.model import Batch, LogPage, RunSnapshot

if TYPE_CHECKING:
    from nbtrain.backends.base import RunCursor
    from nbtrain.spec import JobSpec

__all__ = ["RunReader"]


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
