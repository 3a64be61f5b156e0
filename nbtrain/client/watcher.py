"""The one background reader of a run in this process: a thread that polls the backend and fans out.

A :class:`RunWatcher` owns the run's cursor and view-model. Each round it asks the backend for the status
of the run's current handle (a resume swaps the handle; the watcher follows the new attempt), reads what
is new, folds the events into the :class:`~nbtrain.view.RunView` and hands the batch to its listeners
(the monitor widget, MLflow forwarding). Listeners run on the watcher thread and must not print.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from nbtrain.backends.base import Backend, RunHandle
from nbtrain.model import Batch, RunState, RunStatus
from nbtrain.view import RunView

__all__ = ["WATCH_PERIOD_S", "RunWatcher"]

WATCH_PERIOD_S = 0.1

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

    def sync(self, *, with_lines: bool = False) -> Batch:
        """Read what is new, fold it into :attr:`view`, hand it to the listeners; returns the batch."""
        with self.lock:
            batch = self._cursor.poll(max_lines=50_000 if (with_lines or self._line_listeners) else 0)
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
        while not self._stop.is_set():
            try:
                status = self.backend.status(self._handle())
                self._on_status(status)
                self.sync()
            except Exception:  # noqa: BLE001 - the watcher must never die on a transient read error
                status = RunStatus(RunState.RUNNING)
            if status.state.terminal:
                self.sync()
                return
            self._stop.wait(WATCH_PERIOD_S)
