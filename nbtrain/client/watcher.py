"""The one background reader of a run in this process: a thread that polls the backend and fans out.

A :class:`RunWatcher` owns the run's cursor and view-model. Each round it asks the backend for the status
of the run's current handle (a resume swaps the handle; the watcher follows the new attempt), reads what
is new, folds the events into the :class:`~nbtrain.view.RunView` and hands the batch to its listeners
(the monitor widget, MLflow forwarding). Listeners run on the watcher thread and must not print.

A round costs mostly per file read (a large gang has a thousand), so the thread paces itself: it waits
:data:`WATCH_PERIOD_S` between rounds while a round is cheap, and longer when rounds get dearer, so that it
uses about :data:`WATCH_SHARE` of a core (:func:`watch_wait`; never longer than :data:`MAX_WATCH_PERIOD_S`, nor
so long that a round reads more than :data:`BYTES_PER_ROUND` of lines: a round's lines are in memory at once).
Reading less often only makes the blocks bigger: every line and event still arrives, once. Its rounds also
skip the ranks' files that were idle last time (``StoreCursor.poll(skip_idle=True)``); the final round after
the run ended, and every :meth:`RunWatcher.sync` called from outside, read every file. After every few tens of
MB read, and at the end, the thread hands the freed heap back (:mod:`nbtrain.client.heap`): what it read is freed,
but the C library would keep it resident.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from nbtrain.backends.base import Backend, RunHandle
from nbtrain.backends.storecursor import StoreCursor
from nbtrain.client.heap import release_free_memory, trim_due
from nbtrain.model import Batch, RunState, RunStatus
from nbtrain.view import RunView

__all__ = ["BYTES_PER_ROUND", "LINES_PER_ROUND", "MAX_WATCH_PERIOD_S", "WATCH_PERIOD_S", "WATCH_SHARE", "RunWatcher", "watch_wait"]

WATCH_PERIOD_S = 0.1  # between rounds, while rounds are cheap
MAX_WATCH_PERIOD_S = 0.25  # between rounds, however dear they are (what a round reads is held at once)
WATCH_SHARE = 0.05  # of a core the watcher aims to stay within (rounds' CPU time / wall time)
LINES_PER_ROUND = 50_000  # log lines a round reads at most (x 200 bytes: what one read holds in memory, bounded)
BYTES_PER_ROUND = 8 * 1024 * 1024  # log bytes a round should hold at most (the wait shortens at higher rates; 4 MB cost 512 ranks 17% of a core in per-file reads)
_DRAIN_ROUNDS = 10_000  # at the end: rounds until every file is read (a bound, never reached by finished files)


def watch_wait(round_cpu_s: float, bytes_per_s: float = 0.0) -> float:
    """Seconds to wait after a round that took ``round_cpu_s`` of CPU (smoothed): long enough that rounds use
    :data:`WATCH_SHARE` of a core, within [:data:`WATCH_PERIOD_S`, :data:`MAX_WATCH_PERIOD_S`], and short enough
    that a round reads at most :data:`BYTES_PER_ROUND` of log lines at the rate they come (``bytes_per_s``):
    what a round reads is in memory at once, so memory stays bounded at any rate."""
    longest = min(MAX_WATCH_PERIOD_S, BYTES_PER_ROUND / bytes_per_s) if bytes_per_s > 0 else MAX_WATCH_PERIOD_S
    return max(WATCH_PERIOD_S, min(longest, round_cpu_s / WATCH_SHARE - round_cpu_s))

Listener = Callable[[Batch], None]


class RunWatcher:
    """Reads one run incrementally; see the module docstring. All methods are thread-safe."""

    def __init__(self, backend: Backend, handle: Callable[[], RunHandle], on_status: Callable[[RunStatus], None],
                 *, name: str) -> None:
        self.backend = backend
        self._handle = handle
        self._on_status = on_status
        self.view = RunView()
        self.lock = threading.RLock()
        self._cursor = backend.cursor(handle())
        self._listeners: list[Listener] = []
        self._line_listeners = 0  # listeners that want log lines (reading lines costs: only when needed)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._name = name

    def sync(self, *, with_lines: bool = False, skip_idle: bool = False) -> Batch:
        """Read what is new, fold it into :attr:`view`, hand it to the listeners; returns the batch.

        At most about :data:`LINES_PER_ROUND` lines are read (the rest comes with the next call).
        ``skip_idle`` (the thread's own rounds): ranks' files idle last time may wait for a later round.
        """
        with self.lock:
            max_lines = LINES_PER_ROUND if (with_lines or self._line_listeners) else 0
            if skip_idle and isinstance(self._cursor, StoreCursor):
                batch = self._cursor.poll(max_lines=max_lines, skip_idle=True)
            else:
                batch = self._cursor.poll(max_lines=max_lines)
            for event in batch.events:
                self.view.apply(event)
            for listener in list(self._listeners):
                listener(batch)
            return batch

    def subscribe(self, listener: Listener, *, lines: bool = True, first: bool = False) -> None:
        """Add ``listener`` (``first``: before the others); ``lines``: it wants log lines too."""
        with self.lock:
            if first:
                self._listeners.insert(0, listener)
            else:
                self._listeners.append(listener)
            self._line_listeners += int(lines)

    def start(self) -> None:
        """Start the thread (no-op while it runs)."""
        with self.lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the thread (the run itself goes on)."""
        self._stop.set()

    def _loop(self) -> None:
        cost, rate, wait = 0.0, 0.0, WATCH_PERIOD_S  # a round's CPU seconds, log bytes/s (smoothed); the wait
        last = trimmed = time.monotonic()
        since_trim = 0  # log bytes read since the heap was last trimmed (nbtrain.client.heap)
        while not self._stop.is_set():
            started, read = time.thread_time(), 0
            try:
                status = self.backend.status(self._handle())
                self._on_status(status)
                batch = self.sync(skip_idle=True)
                read = sum(len(block.data) for block in getattr(batch.lines, "blocks", ()))
            except Exception:  # noqa: BLE001 - the watcher must never die on a transient read error
                status = RunStatus(RunState.RUNNING)
            if status.state.terminal:
                self._drain()
                release_free_memory()
                return
            now = time.monotonic()
            since_trim += read
            if trim_due(since_trim, now - trimmed):
                release_free_memory()
                since_trim, trimmed = 0, now
            cost += 0.3 * (time.thread_time() - started - cost)
            rate += 0.3 * (read / max(now - last, 1e-3) - rate)
            last = now
            wait = watch_wait(cost, rate)
            self._stop.wait(wait)

    def _drain(self) -> None:
        """After the run ended: read until every file is read to its end (one round may hold back lines)."""
        for _ in range(_DRAIN_ROUNDS):
            batch = self.sync()
            if not batch.events and not batch.lines:
                return
