"""How a run is shown in the notebook: its monitor widget (created once, displayed, refreshed at the end) and the
readable summary ``Run.summary()`` prints. Display only: nothing here changes the run or its record.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nbtrain.model import Batch, Failure, RunState
from nbtrain.secrets import mask

if TYPE_CHECKING:
    from nbtrain.client.run import Run

__all__ = ["PARAMS_SHOWN", "RunDisplay", "summary_text"]

PARAMS_SHOWN = 12  # init_trackers config entries run.summary() lists


class RunDisplay:
    """The monitor widget of one run and the cell output it was displayed in (main thread for ``show``).

    ``subscribe_first(listener)`` feeds the widget from the run's watcher before any other listener: its final
    render must not wait for tracking's end-of-run flush. ``lock`` is the run's lock (the widget reads the view).
    """

    def __init__(self, run: Run, lock: threading.RLock | threading.Lock,
                 subscribe_first: Callable[[Callable[[Batch], None]], None]) -> None:
        self._run = run
        self._lock = lock
        self._subscribe_first = subscribe_first
        self._monitor: Any = None
        self._display: Any = None

    def monitor(self) -> Any:
        """The live monitor widget (created once; fed by the watcher thread, which is started)."""
        with self._lock:
            if self._monitor is None:
                from nbtrain.widgets.monitor import MonitorWidget

                self._run.sync()
                self._monitor = MonitorWidget(self._run)
                self._subscribe_first(self._monitor.on_batch)
        self._run.watch()
        return self._monitor

    def show(self) -> None:
        """Display the monitor in the current cell (main thread only); :meth:`refresh` re-renders it at the end."""
        from IPython.display import display

        self._display = display(self.monitor(), display_id=True)

    def refresh(self) -> None:
        """Re-render the displayed monitor so its text/plain summary (kept by headless runs) is final."""
        if self._display is not None and self._monitor is not None:
            self._monitor.on_batch(Batch())  # flush what is pending before the re-render
            if not self._monitor.front_end_seen:
                # headless (nbclient, nbconvert): re-render so the kept text/plain is the final summary;
                # with a live browser view this would only rebuild the view and lose its scroll position
                self._display.update(self._monitor)


def summary_text(run: Run) -> str:
    """Readable multi-line summary: state, world size, duration, last metrics, notices, attempts, failure."""
    state = run.status()
    run.sync()
    view = run.view
    spec = run.spec
    started = view.started or run.record.created
    ended = view.ended or run.record.ended or time.time()
    lines = [
        f"run {run.id} ({spec.name}) on {run.record.backend}: {state.value}",
        f"  gang: {spec.nodes} node(s) x {spec.procs} process(es) = world size {spec.world_size}",
        f"  duration: {ended - started:.1f} s",
    ]
    snap = run.snapshot(refresh=False)
    warm = snap.warm
    if warm is not None and warm.gang:
        lines.append(f"  warm gang: {warm.gang}, generation {warm.generation}"
                     + (f"; recycled: {warm.recycled}" if warm.recycled else ""))
    detail = snap.detail.strip() if snap.detail else ""
    if detail and not state.terminal:  # what the backend says it is doing: queued and why, a stall, ...
        lines.append(f"  now: {detail}")
    last = view.last_metrics(0)
    if last:
        lines.append("  last metrics (rank 0): " + ", ".join(f"{k}={v:.6g}" for k, v in last.items()))
    if view.params:  # init_trackers(config=...): what MLflow gets as params, secret-looking values masked
        shown = [f"{k}={mask(k, v)}" for k, v in list(view.params.items())[:PARAMS_SHOWN]]
        more = f" (+{len(view.params) - PARAMS_SHOWN} more)" if len(view.params) > PARAMS_SHOWN else ""
        lines.append("  config (init_trackers): " + ", ".join(shown) + more)
    lines += [f"  note: {notice}" for notice in view.notices]
    if len(view.attempts) > 1:
        for entry in (view.attempts[a] for a in sorted(view.attempts)):
            why = Failure.from_dict(entry["failure"]).summary() if entry.get("failure") else ""
            lines.append(f"  attempt {entry['attempt']}: {entry['state']}" + (f" — {why}" if why else ""))
    if view.checkpoints:
        newest = view.checkpoints[-1]
        lines.append(f"  checkpoints: {len(view.checkpoints)}, latest at step {newest['step']} ({newest['path']})")
    if state is RunState.CANCELLED and run.record.cancel_reason:
        lines.append(f"  CANCELLED: {run.record.cancel_reason}")
    failure = run.failure if state is RunState.FAILED else None
    if failure is not None:
        lines.append(f"  FAILED: {failure.summary()}")
        if failure.traceback:
            lines += ["    " + t for t in failure.traceback.rstrip().splitlines()[-15:]]
    return "\n".join(lines)
