"""The small read interface of a run: what the widget, MLflow forwarding, the server and the CLI may use.

:class:`~nbtrain.client.Run` implements it; readers type their argument as :class:`RunReader`, never reach
into the Run's record, store, backend or view, so a reader can be fed by anything that can answer these
few questions (a test double, a remote run).
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

    def snapshot(self) -> RunSnapshot:
        """An immutable picture of the run now."""
        ...

    def cursor(self) -> RunCursor:
        """A fresh cursor over every event and log line, from the beginning."""
        ...

    def log_page(self, rank: int, start: int, limit: int, *, attempt: int | None = None) -> LogPage:
        """A page of one rank's log (negative ``start``: from the end)."""
        ...

    def notice(self, message: str) -> None:
        """Show ``message`` among the run's notices in this process."""
        ...

    def subscribe(self, listener: Callable[[Batch], None], *, lines: bool = True) -> None:
        """Call ``listener`` from the run's watcher thread with everything new."""
        ...
