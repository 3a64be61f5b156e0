"""The monitor widget: an anywidget whose ES module (static/monitor.js) renders PROTOCOL.md.

One per run handle. It is a listener of the run's single watcher thread: the watcher calls
:meth:`MonitorWidget.on_batch` ~10 times a second; the widget sends at most one custom message per
0.2 s and re-syncs its small traits at most once a second, or every 0.4 s while events arrive in a gang whose
grid shows each rank's step (64 ranks or fewer: the steps keep up with the charts), and at once on a state
change. It never prints
or displays from that thread; the final text summary is refreshed by ``Run.wait`` on the main thread.

What it reads of the run is :class:`MonitoredRun`: the read interface (state, attempt, failure and notices
from ``snapshot(refresh=False)``, pages from ``log_page``), the run's controls, and copies of what a snapshot
does not carry (every rank's step, liveness and environment: ``ranks()``; rank 0's chart history so far:
``metric_series(0)``).
"""

from __future__ import annotations

import pathlib
import platform
import threading
import time
from collections.abc import Mapping
from importlib import metadata
from typing import Any, Protocol

import anywidget
import traitlets

from nbtrain.model import Batch, RunSnapshot
from nbtrain.reader import RunReader
from nbtrain.view import RankInfo
from nbtrain.widgets.viewmodel import MonitorLimits, MonitorModel, page_reply, page_request

__all__ = ["MonitorWidget", "MonitoredRun"]

_STATIC = pathlib.Path(__file__).parent / "static"
FLUSH_EVERY_S = 0.2
TRAITS_EVERY_S = 1.0
PROGRESS_EVERY_S = 0.4  # traits again this soon when events came (the grid's steps keep up with the charts) ...
DETAILED_MAX_RANKS = 64  # ... in gangs whose grid shows each rank's step (rankview.ts: larger ones show colours)


def kernel_versions() -> dict[str, str | None]:
    """Python, torch and accelerate versions of this kernel, without importing torch."""

    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    return {"python": platform.python_version(), "torch": version("torch"), "accelerate": version("accelerate")}


class MonitoredRun(RunReader, Protocol):
    """What the monitor needs of a run (:class:`nbtrain.client.Run` is one): the read interface, plus

    - ``ranks()``, ``metric_series(rank)``: copies of what :class:`~nbtrain.model.RunSnapshot` does not carry
      (each rank's step, liveness and environment for the grid and the environment check; rank 0's metric
      history for the charts), from the events read so far, without I/O (callable on the watcher thread);
    - ``cancel()``, ``resume()``: the Stop and Resume buttons;
    - ``summary()``: the text/plain part that headless runs keep.
    """

    def ranks(self) -> Mapping[int, RankInfo]:
        """What the events read so far say about each rank of the current attempt (a copy; no I/O)."""
        ...

    def metric_series(self, rank: int = 0) -> Mapping[str, list[tuple[int, int, float]]]:
        """``rank``'s metric series read so far, ``{name: [(attempt, step, value), ...]}`` (a copy; no I/O)."""
        ...

    def cancel(self) -> None:
        """End every process of the run."""
        ...

    def resume(self) -> Any:
        """Launch the run again from its latest checkpoint."""
        ...

    def summary(self) -> str:
        """A readable multi-line summary of the run."""
        ...


class MonitorWidget(anywidget.AnyWidget):
    """Live view of one run: header, rank grid, charts, logs, failure triage, environment check."""

    _esm = _STATIC / "monitor.js"
    _css = _STATIC / "monitor.css"

    header = traitlets.Dict().tag(sync=True)
    ranks = traitlets.Dict().tag(sync=True)
    failure = traitlets.Dict().tag(sync=True)
    env = traitlets.Dict().tag(sync=True)
    metric_keys = traitlets.List(traitlets.Unicode()).tag(sync=True)
    log_ranks = traitlets.List(traitlets.Int()).tag(sync=True)
    line_counts = traitlets.Dict().tag(sync=True)

    def __init__(self, run: MonitoredRun, *, limits: MonitorLimits | None = None, **kwargs: Any) -> None:
        # Everything is computed before the widget's comm opens, so the first message carries it.
        self._run = run
        snapshot = run.snapshot(refresh=False)  # the caller has just read the run; no I/O here
        self._model = MonitorModel(
            run.id, snapshot.name, snapshot.backend, snapshot.nodes, snapshot.procs, kernel_versions(),
            limits or MonitorLimits(),
        )
        self._lock = threading.Lock()
        self._last_flush = 0.0
        self._last_traits = 0.0
        self._events_since_traits = False  # the rank grid may have changed since the traits were synced
        self._progress_every = PROGRESS_EVERY_S if snapshot.world_size <= DETAILED_MAX_RANKS else TRAITS_EVERY_S
        self._stopping = False
        self.front_end_seen = False  # a browser view said hello: it renders the final state itself
        self.messages_sent = 0  # custom messages + trait syncs, for benchmarks
        for key, points in run.metric_series(0).items():  # what the handle saw before the widget existed
            for attempt, step, value in points:
                self._model.add_point(key, attempt, step, value, send=False)
        super().__init__(**self._state_traits(snapshot), **kwargs)
        self._last_state = snapshot.state
        self.on_msg(self._on_front_end_message)

    # -- watcher side -----------------------------------------------------------------------------
    def on_batch(self, batch: Batch) -> None:
        """Watcher-thread callback: accumulate, then flush if due (always on a terminal state)."""
        # before our lock: the snapshot takes the run's, which the watcher holds while it calls us
        snapshot = self._run.snapshot(refresh=False)  # no I/O: never a nested read on the watcher thread
        with self._lock:
            self._model.ingest(batch)
            self._events_since_traits = self._events_since_traits or bool(batch.events)
            state = snapshot.state
            now = time.monotonic()
            terminal = state.terminal
            if not terminal and now - self._last_flush < FLUSH_EVERY_S:
                return
            self._last_flush = now
            message = self._model.take_batch()
            if message is not None:
                self.send(message)
                self.messages_sent += 1
            since = now - self._last_traits
            if (terminal or state != self._last_state or since >= TRAITS_EVERY_S
                    or (self._events_since_traits and since >= self._progress_every)):
                self._last_traits = now
                self._events_since_traits = False
                self._sync_traits(snapshot)

    def _state_traits(self, snapshot: RunSnapshot) -> dict[str, Any]:
        ranks, model = self._run.ranks(), self._model
        return {
            "header": model.header(snapshot, ranks, stopping=self._stopping, tracking_url=self._run.tracking_url()),
            "ranks": model.ranks(ranks, snapshot.state),
            "failure": model.failure(snapshot),
            "env": model.env(ranks),
            "metric_keys": list(model.series),
            "log_ranks": sorted(model.line_counts),
            "line_counts": {str(r): n for r, n in model.line_counts.items()},
        }

    def _sync_traits(self, snapshot: RunSnapshot) -> None:
        if snapshot.state.terminal:
            self._stopping = False  # that stop is over: a resumed attempt can be stopped again
        values = self._state_traits(snapshot)
        with self.hold_sync():  # one comm message for all trait changes
            for name, value in values.items():
                current = getattr(self, name)
                if name == "header" and {**current, "now": None} == {**value, "now": None}:
                    continue  # only the clock moved: nothing to send
                if current != value:
                    setattr(self, name, value)
        self._last_state = snapshot.state
        self.messages_sent += 1

    # -- front-end side (kernel main thread) -------------------------------------------------------
    def _on_front_end_message(self, widget: Any, content: dict[str, Any], buffers: list[bytes]) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == "hello":
            self.front_end_seen = True
            with self._lock:
                self.send(self._model.snapshot())
                self.messages_sent += 1
        elif kind == "page":
            self.send(self._page(int(content.get("rank", 0)), int(content.get("before", 0)),
                                 int(content.get("limit", 500))))
            self.messages_sent += 1
        elif kind == "resume":
            # relaunching plans and starts a supervisor: off the comm handler, errors become a notice
            threading.Thread(target=self._resume, name=f"nbtrain-resume-{self._run.id}", daemon=True).start()
        elif kind == "stop":
            self._stopping = True
            self._sync_traits(self._run.snapshot(refresh=False))
            # cancel takes seconds: off the comm handler so the kernel stays responsive
            threading.Thread(target=self._run.cancel, name=f"nbtrain-cancel-{self._run.id}", daemon=True).start()

    def _resume(self) -> None:
        self._stopping = False
        try:
            self._run.resume()
        except Exception as error:  # noqa: BLE001 - shown in the widget, never raised into a comm thread
            self._run.notice(f"resume failed: {error}")
            self._sync_traits(self._run.snapshot(refresh=False))

    def _page(self, rank: int, before: int, limit: int) -> dict[str, Any]:
        # One seek-based page read (never the whole log), from the attempt whose lines the model numbers.
        start, count = page_request(before, limit)
        page = self._run.log_page(rank, start, count, attempt=self._model.line_attempt)
        return page_reply(rank, page)

    # -- display ----------------------------------------------------------------------------------
    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        # The text/plain part is what headless runs (nbclient, nbconvert, terminal IPython) keep.
        bundle = super()._repr_mimebundle_(**kwargs)
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        if isinstance(data, dict):
            data["text/plain"] = self._run.summary()
        return bundle
