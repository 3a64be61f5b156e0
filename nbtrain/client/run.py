"""The user's side of a run: submit (spec + bundle -> backend -> store -> watcher) and the Run handle.

A Run is cheap to rebuild: everything lives in the store and the backend, so ``attach(run_id)`` in a
new kernel gives the same handle as the one returned at submit.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from nbtrain.backends import get_backend
from nbtrain.backends.base import Batch, Failure, Plan, RunHandle, RunState
from nbtrain.errors import NbtrainError, RunFailedError
from nbtrain.events import Event
from nbtrain.spec import JobSpec, tracking_default
from nbtrain.store import RunRecord, Store
from nbtrain.view import RunView

__all__ = ["Run", "attach", "plan_bundle", "rerun", "runs", "submit_bundle"]

WATCH_PERIOD_S = 0.1


class Run:
    """Handle on one distributed run. Methods are safe to call from any thread.

    ``status()``, ``wait()``, ``logs()``, ``metrics()``, ``result()``, ``cancel()``, ``failure``.
    """

    def __init__(self, record: RunRecord, store: Store, backend: Any | None = None) -> None:
        self.record = record
        self.store = store
        self.backend = backend or get_backend(record.backend, store=store)
        self.handle = RunHandle(record.backend, record.run_id, record.handle)
        self.view = RunView()
        self._cursor = self.backend.cursor(self.handle)
        self._lock = threading.RLock()
        self._listeners: list[Callable[[Batch], None]] = []
        self._line_listeners = 0  # listeners that want log lines (reading lines costs: only when needed)
        self._tracker: Any = None
        self._watcher: threading.Thread | None = None
        self._stop = threading.Event()
        self._monitor: Any = None
        self._display: Any = None

    # -- identity ---------------------------------------------------------------------------------
    @property
    def id(self) -> str:
        """The run id (e.g. ``digits-3fa9c2``)."""
        return self.record.run_id

    @property
    def spec(self) -> JobSpec:
        """The JobSpec this run was submitted with."""
        return self.record.spec

    # -- state ------------------------------------------------------------------------------------
    def sync(self, *, with_lines: bool = False) -> Batch:
        """Read what is new from the backend and fold it into :attr:`view` (also done by the watcher)."""
        with self._lock:
            batch = self._cursor.poll(max_lines=50_000 if (with_lines or self._line_listeners) else 0)
            for event in batch.events:
                self.view.apply(event)
            for listener in list(self._listeners):
                listener(batch)
            return batch

    def status(self) -> RunState:
        """The run's state now (asks the backend; records the verdict when terminal)."""
        status = self.backend.status(self.handle)
        if status.state.terminal and self.record.state != status.state.value:
            self.sync()
            self.record.state = status.state.value
            self.record.ended = status.ended or time.time()
            failure = status.failure or self.view.failure
            self.record.failure = failure.to_dict() if failure else None
            self.store.save(self.record)
        return status.state

    @property
    def failure(self) -> Failure | None:
        """The first failing rank and why, once the run FAILED (None otherwise)."""
        if self.status() is not RunState.FAILED:
            return None
        return Failure.from_dict(self.record.failure) if self.record.failure else Failure(reason="unknown")

    def wait(self, timeout: float | None = None, *, raise_on_failure: bool = True, progress: bool = True) -> RunState:
        """Block until the run ends (or ``timeout`` s pass: TimeoutError). Shows a status line meanwhile.

        Raises RunFailedError (naming the first failing rank, its reason and traceback) when the run
        FAILED and ``raise_on_failure``. Ctrl-C cancels the run and re-raises KeyboardInterrupt.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        line = _ProgressLine(enabled=progress)
        try:
            while True:
                state = self.status()
                self.sync()
                line.update(self._progress_text(state))
                if state.terminal:
                    break
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"run {self.id} is still {state.value} after {timeout} s; wait longer or cancel it.")
                time.sleep(0.2)
        except KeyboardInterrupt:
            line.update(f"{self.id}: interrupted — cancelling the gang…")
            self.cancel()
            raise
        finally:
            line.close()
        self._refresh_display()
        if state is RunState.FAILED and raise_on_failure:
            failure = self.failure
            detail = ""
            if failure is not None and failure.traceback:
                detail = "\n\nTraceback of the first failing rank:\n" + failure.traceback
            elif failure is not None and failure.last_lines:
                detail = "\n\nLast lines of the first failing rank:\n" + "\n".join(failure.last_lines)
            summary = failure.summary() if failure else "unknown failure"
            raise RunFailedError(f"run {self.id} failed: {summary}.{detail}", failure)
        return state

    def _progress_text(self, state: RunState) -> str:
        view = self.view
        steps = [info.last_step for info in view.ranks.values() if info.last_step is not None]
        step = f" step {max(steps)}" + (f"/{view.total}" if view.total else "") if steps else ""
        started = view.started or self.record.created
        elapsed = time.time() - started if not state.terminal else (view.ended or time.time()) - started
        metrics = ", ".join(f"{k}={v:.4g}" for k, v in list(view.last_metrics(0).items())[:3])
        return f"{self.id}: {state.value}{step} ({elapsed:.0f} s, {len(view.ranks)}/{self.spec.world_size} ranks up){' ' + metrics if metrics else ''}"

    # -- data -------------------------------------------------------------------------------------
    def logs(self, rank: int = 0, *, tail: int | None = None, attempt: int | None = None) -> str:
        """Output of one global rank (stdout and stderr, C-level included), oldest first."""
        if not 0 <= rank < self.spec.world_size:
            raise ValueError(f"rank {rank} does not exist; this run has ranks 0-{self.spec.world_size - 1}.")
        return "\n".join(self.backend.logs(self.handle, rank, tail=tail, attempt=attempt))

    def metrics(self, rank: int = 0) -> dict[str, list[tuple[int, float]]]:
        """Every metric ``rank`` reported so far: ``{name: [(step, value), ...]}`` in report order.

        Across attempts, points of a later attempt replace those of an earlier one at the same step.
        """
        self.sync()
        with self._lock:
            series = self.view.metrics.get(rank, {})
            out: dict[str, list[tuple[int, float]]] = {}
            for name, points in series.items():
                latest: dict[int, tuple[int, float]] = {}
                for attempt, step, value in points:
                    if step not in latest or attempt >= latest[step][0]:
                        latest[step] = (attempt, value)
                out[name] = [(step, value) for step, (_, value) in sorted(latest.items())]
            return out

    def checkpoints(self) -> list[dict[str, Any]]:
        """Complete checkpoints written so far: ``[{"step", "path", "time", "attempt", "bytes"}, ...]`` by step."""
        self.sync()
        with self._lock:
            return [dict(c) for c in self.view.checkpoints]

    def attempts(self) -> list[dict[str, Any]]:
        """Every launch of this run (first submit, automatic restarts, resumes) with its state and failure."""
        self.sync()
        with self._lock:
            return [dict(self.view.attempts[a]) for a in sorted(self.view.attempts)]

    def resume(self) -> Run:
        """Launch the run again as a new attempt, from its latest complete checkpoint (same spec and bundle).

        The training code restores with ``start = nbtrain.restore(accelerator)``. Raises NbtrainError
        while the run is still going. Returns this handle (now following the new attempt).
        """
        return self._relaunch(self.record.bundle_digest, kind="resume")

    def _relaunch(self, bundle_digest: str, *, kind: str) -> Run:
        state = self.status()
        if not state.terminal:
            raise NbtrainError(f"run {self.id} is still {state.value}; wait for it or cancel it before resuming.")
        bundle_dir = self.store.bundles / bundle_digest
        if not bundle_dir.is_dir():
            raise NbtrainError(f"the bundle {bundle_digest[:12]} of run {self.id} is gone from {self.store.bundles}; "
                               "re-run the cell with --resume instead.")
        attempt = max([self.view.attempt, *self.view.attempts, -1]) + 1
        plan = self.backend.plan(self.spec, str(bundle_dir), bundle_digest, self.id, attempt=attempt)
        self.record.attempts.append({"attempt": attempt, "submitted": time.time(), "kind": kind,
                                     "bundle_digest": bundle_digest})
        self.record.bundle_digest = bundle_digest
        self.record.state = RunState.PENDING.value
        self.record.failure = None
        self.record.ended = None
        self.store.save(self.record)
        self.backend.submit(plan)
        self.watch()
        return self

    def events(self) -> Iterator[Event]:
        """Every event of the run so far (fresh read from the backend)."""
        return self.backend.events(self.handle, follow=False)

    def result(self, timeout: float | None = None) -> Any:
        """Rank 0's return value (the cell's last expression); waits for the run to end.

        Raises RunFailedError when the run failed, and NbtrainError when it was cancelled.
        """
        state = self.wait(timeout, progress=False)
        if state is RunState.CANCELLED:
            raise NbtrainError(f"run {self.id} was cancelled; it has no result.")
        import cloudpickle

        path = self.store.attempt_dir(self.id, self.view.attempt) / "result.pkl"
        if path.exists():
            return cloudpickle.loads(path.read_bytes())
        self.sync()
        if self.view.result_b64:  # backends without a shared disk send it as an event
            import base64

            return cloudpickle.loads(base64.b64decode(self.view.result_b64))
        return None

    def cancel(self) -> None:
        """End every process of the run (idempotent); returns once the run is terminal."""
        self.backend.cancel(self.handle)
        self.status()

    # -- watcher ----------------------------------------------------------------------------------
    def subscribe(self, listener: Callable[[Batch], None], *, lines: bool = True) -> None:
        """Call ``listener(batch)`` from the watcher thread for everything new (events, and lines if ``lines``).

        Listeners must not print or display (output would land in whatever cell runs then).
        """
        with self._lock:
            self._listeners.append(listener)
            self._line_listeners += int(lines)
        self.watch()

    def _start_tracking(self) -> None:
        """Forward this run to MLflow from the notebook side (once per handle; nothing with tracking off)."""
        if self.spec.tracking and tracking_default() and self._tracker is None:
            from nbtrain.tracking import TrackingForwarder

            self._tracker = TrackingForwarder(self)
            self.subscribe(self._tracker.on_batch, lines=False)

    def close(self) -> None:
        """Stop following the run in this process (the run goes on); flushes what tracking buffered."""
        self.stop_watching()
        if self._tracker is not None:
            self._tracker.close()

    def watch(self) -> None:
        """Start the single background watcher of this handle (no-op if running or the run ended)."""
        with self._lock:
            if self._watcher is not None and self._watcher.is_alive():
                return
            self._stop.clear()
            self._watcher = threading.Thread(target=self._watch, name=f"nbtrain-watch-{self.id}", daemon=True)
            self._watcher.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                state = self.status()
                self.sync()
            except Exception:  # noqa: BLE001 - the watcher must never die on a transient read error
                state = RunState.RUNNING
            if state.terminal:
                self.sync()
                return
            self._stop.wait(WATCH_PERIOD_S)

    def stop_watching(self) -> None:
        """Stop the watcher thread (the run itself goes on)."""
        self._stop.set()

    # -- display ----------------------------------------------------------------------------------
    def monitor(self) -> Any:
        """The live monitor widget of this run (created once; fed by the watcher thread)."""
        with self._lock:
            if self._monitor is None:
                from nbtrain.widgets.monitor import MonitorWidget

                self.sync()
                self._monitor = MonitorWidget(self)
                # the monitor goes first: its final render must not wait for tracking's end-of-run flush
                self._listeners.insert(0, self._monitor.on_batch)
                self._line_listeners += 1
        self.watch()
        return self._monitor

    def show(self) -> None:
        """Display the monitor in the current cell (main thread only); ``wait`` refreshes it at the end."""
        from IPython.display import display

        self._display = display(self.monitor(), display_id=True)

    def _refresh_display(self) -> None:
        """Re-render the displayed monitor so its text/plain summary (kept by headless runs) is final."""
        if self._display is not None and self._monitor is not None:
            self._monitor.on_batch(Batch())  # flush what is pending before the re-render
            if not self._monitor.front_end_seen:
                # headless (nbclient, nbconvert): re-render so the kept text/plain is the final summary;
                # with a live browser view this would only rebuild the view and lose its scroll position
                self._display.update(self._monitor)


    def __repr__(self) -> str:
        return f"<Run {self.id} {self.spec.nodes}x{self.spec.procs} {self.record.backend}: {self.status().value}>"

    def summary(self) -> str:
        """Readable multi-line summary: state, world size, duration, last metrics, failure."""
        state = self.status()
        self.sync()
        view = self.view
        started = view.started or self.record.created
        ended = view.ended or self.record.ended or time.time()
        lines = [
            f"run {self.id} ({self.spec.name}) on {self.record.backend}: {state.value}",
            f"  gang: {self.spec.nodes} node(s) x {self.spec.procs} process(es) = world size {self.spec.world_size}",
            f"  duration: {ended - started:.1f} s",
        ]
        last = view.last_metrics(0)
        if last:
            lines.append("  last metrics (rank 0): " + ", ".join(f"{k}={v:.6g}" for k, v in last.items()))
        for notice in view.notices:
            lines.append(f"  note: {notice}")
        if len(view.attempts) > 1:
            for entry in (view.attempts[a] for a in sorted(view.attempts)):
                why = Failure.from_dict(entry["failure"]).summary() if entry.get("failure") else ""
                lines.append(f"  attempt {entry['attempt']}: {entry['state']}" + (f" — {why}" if why else ""))
        if view.checkpoints:
            last = view.checkpoints[-1]
            lines.append(f"  checkpoints: {len(view.checkpoints)}, latest at step {last['step']} ({last['path']})")
        failure = self.failure if state is RunState.FAILED else None
        if failure is not None:
            lines.append(f"  FAILED: {failure.summary()}")
            if failure.traceback:
                lines += ["    " + t for t in failure.traceback.rstrip().splitlines()[-15:]]
        return "\n".join(lines)


class _ProgressLine:
    """One status line that rewrites itself: a display handle in IPython, ``\\r`` on a terminal, lines otherwise."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.handle: Any = None
        self.last = ""
        self.last_plain = 0.0
        ipython = sys.modules.get("IPython")
        if enabled and ipython is not None and getattr(ipython, "get_ipython", lambda: None)() is not None:
            from IPython.display import display

            self.handle = display({"text/plain": ""}, raw=True, display_id=True)

    def update(self, text: str) -> None:
        if not self.enabled or text == self.last:
            return
        self.last = text
        if self.handle is not None:
            self.handle.update({"text/plain": text}, raw=True)
        elif sys.stderr.isatty():
            sys.stderr.write("\r\033[K" + text)
            sys.stderr.flush()
        elif time.monotonic() - self.last_plain > 5:
            self.last_plain = time.monotonic()
            sys.stderr.write(text + "\n")

    def close(self) -> None:
        if self.enabled and self.handle is None and sys.stderr.isatty():
            sys.stderr.write("\n")


def _prepare(bundle: Any, spec: JobSpec, store: Store | None, backend: Any | None) -> tuple[Store, Any, Path]:
    store = store or Store()
    store.ensure_writable()
    backend = backend or get_backend(spec.backend, store=store)
    return store, backend, bundle.write(store.bundles)


def plan_bundle(bundle: Any, spec: JobSpec, *, store: Store | None = None, backend: Any | None = None) -> Plan:
    """Dry run: write the (content-addressed) bundle and return the backend's plan; nothing is submitted."""
    store, backend, bundle_dir = _prepare(bundle, spec, store, backend)
    return backend.plan(spec, str(bundle_dir), bundle.digest, f"{spec.slug}-dryrun")


def submit_bundle(
    bundle: Any,
    spec: JobSpec,
    *,
    store: Store | None = None,
    kind: str = "cell",
    notebook: dict[str, Any] | None = None,
    backend: Any | None = None,
) -> Run:
    """Plan and submit ``bundle`` under ``spec``; returns the watched Run at once.

    Order: write the bundle (content-addressed), plan (all validation; nothing runs), save the
    RunRecord, then start the gang. A failure before submit leaves no run behind.
    """
    store, backend, bundle_dir = _prepare(bundle, spec, store, backend)
    run_id = store.new_run_id(spec.name)
    try:
        plan = backend.plan(spec, str(bundle_dir), bundle.digest, run_id)
    except BaseException:
        _remove_empty(store.run_dir(run_id))
        raise
    record = RunRecord(run_id=run_id, spec=spec, bundle_digest=bundle.digest, backend=backend.name,
                       kind=kind, notebook=dict(notebook or {}))
    record.attempts.append({"attempt": 0, "submitted": time.time()})
    store.save(record)
    try:
        handle = backend.submit(plan)
    except BaseException:
        # nothing started (403, 409, no kubeconfig, ...): leave no "pending" run behind
        shutil.rmtree(store.run_dir(run_id), ignore_errors=True)
        raise
    record.handle = dict(handle.data)
    store.save(record)
    run = Run(record, store, backend)
    run._start_tracking()
    run.watch()
    return run


def _remove_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


def attach(run_id: str, *, store: Store | None = None, watch: bool = True) -> Run:
    """Rebuild the handle of ``run_id`` (a unique prefix is enough) from the store, e.g. after a kernel restart."""
    store = store or Store()
    record = store.load(store.resolve(run_id))
    run = Run(record, store)
    run.sync()
    if watch:
        run._start_tracking()
        run.watch()
    return run


def rerun(run_id: str | None = None, *, store: Store | None = None) -> Run:
    """Run ``run_id`` (default: the newest FAILED run) again as a NEW run: same spec, same bundle, no checkpoint."""
    store = store or Store()
    if run_id is None:
        failed = [r for r in runs(store=store) if r.status() is RunState.FAILED]
        if not failed:
            raise NbtrainError("there is no failed run to re-run; name one: %nbtrain rerun RUN.")
        source = failed[0]
    else:
        source = attach(run_id, store=store, watch=False)
    bundle_dir = store.bundles / source.record.bundle_digest
    if not bundle_dir.is_dir():
        raise NbtrainError(f"the bundle of run {source.id} is gone from {store.bundles}; run its cell again.")
    backend = get_backend(source.record.backend, store=store)
    new_id = store.new_run_id(source.spec.name)
    try:
        plan = backend.plan(source.spec, str(bundle_dir), source.record.bundle_digest, new_id)
    except BaseException:
        _remove_empty(store.run_dir(new_id))
        raise
    record = RunRecord(run_id=new_id, spec=source.spec, bundle_digest=source.record.bundle_digest,
                       backend=backend.name, kind=source.record.kind, notebook=dict(source.record.notebook))
    record.attempts.append({"attempt": 0, "submitted": time.time(), "rerun_of": source.id})
    store.save(record)
    record.handle = dict(backend.submit(plan).data)
    store.save(record)
    run = Run(record, store, backend)
    run._start_tracking()
    run.watch()
    return run


def runs(*, store: Store | None = None) -> list[Run]:
    """Every run in the store, newest first (handles are not watched)."""
    store = store or Store()
    return [Run(record, store) for record in store.records()]
