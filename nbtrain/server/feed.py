"""One poller for every server-sent-events client of ``/nbtrain/events``.

Reading the store costs the same for one client as for fifty, so it is done once: while at least one client
listens, a single task lists the runs every ``interval`` seconds (in an executor thread, off the event loop)
and publishes the result as a numbered :class:`Tick`. Each client keeps only what it has already sent (a
signature per run) and sends what changed: the work per client per tick is a dictionary lookup per run.
When the last client leaves the task ends; the next client starts it again.

The number of clients is capped (:attr:`SummaryFeed.max_clients`): above it, :meth:`SummaryFeed.join` says no
and the handler answers 503 with a Retry-After.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nbtrain.model import json_safe

__all__ = ["DEFAULT_MAX_CLIENTS", "SummaryFeed", "Tick", "signature"]

log = logging.getLogger("nbtrain.server")

#: Concurrent event streams a server serves by default (``NbtrainExtension.max_event_streams``).
DEFAULT_MAX_CLIENTS = 32
_WATCHED = ("state", "attempt", "step", "failure")  # a row is sent again when one of these changes


def signature(row: dict[str, Any]) -> str:
    """What a client compares to decide whether ``row`` changed since it last sent it."""
    return json.dumps(json_safe({k: row.get(k) for k in _WATCHED}), sort_keys=True, default=str)


@dataclass(frozen=True)
class Tick:
    """One poll of the store: its number (1, 2, ...) and ``(run id, signature, row)`` for every readable run."""

    number: int
    runs: tuple[tuple[str, str, dict[str, Any]], ...]


class SummaryFeed:
    """The shared poller (see the module doc). Used from the server's event loop only."""

    def __init__(self, poll: Callable[[], list[dict[str, Any]]], *, interval: float = 1.0,
                 max_clients: int = DEFAULT_MAX_CLIENTS) -> None:
        self._poll = poll
        self.interval = interval
        self.max_clients = max_clients
        self.clients = 0
        self.polls = 0  # how many times the store was listed (for tests and the curious)
        self._tick = Tick(0, ())
        self._changed: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def join(self) -> int | None:
        """Count one more client and return the tick number it should wait after (``next(after=...)``).

        None (nothing counted) when :attr:`max_clients` already listen. A client joining a running poller
        starts from its latest tick (at most ``interval`` old); one that starts the poller waits for a fresh one.
        """
        if self.clients >= self.max_clients:
            return None
        self.clients += 1
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
            return self._tick.number
        return max(0, self._tick.number - 1)

    def leave(self) -> None:
        """One client is gone (call exactly once per successful :meth:`join`)."""
        self.clients = max(0, self.clients - 1)

    async def next(self, after: int, *, timeout: float) -> Tick:
        """The first tick numbered above ``after``; the latest tick if none comes within ``timeout`` seconds."""
        if self._tick.number > after:
            return self._tick
        if self._changed is None:
            self._changed = asyncio.Event()
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        return self._tick

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self.clients > 0:
            try:
                rows = await loop.run_in_executor(None, self._poll)
            except Exception:  # keep serving the last good tick; the next poll may work
                log.exception("nbtrain: listing the runs for the event stream failed")
            else:
                self.polls += 1
                self._tick = Tick(self._tick.number + 1, tuple((str(r.get("id")), signature(r), r) for r in rows))
                changed, self._changed = self._changed, asyncio.Event()
                if changed is not None:
                    changed.set()
            await asyncio.sleep(self.interval)
