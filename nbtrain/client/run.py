"""The thin user handle of one run: state, wait, data, cancel/resume, display.

A Run is cheap to rebuild: everything lives in the store and the backend, so ``attach(run_id)`` in a
new kernel gives the same handle as the one returned at submit. Reading is done by one
:class:`~nbtrain.client.watcher.RunWatcher`; launching by :mod:`nbtrain.client.launch`.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from nbtrain.backends import get_backend
from nbtrain.backends.base import Backend, Plan, RunCursor, RunHandle
from nbtrain.client import launch
from nbtrain.client.agentlink import TrackingLink
from nbtrain.client.display import RunDisplay, summary_text
from nbtrain.client.progress import ProgressLine
from nbtrain.client.verdict import save_verdict
from nbtrain.client.watcher import RunWatcher
from nbtrain.errors import NbtrainError, RunFailedError
from nbtrain.events import Event
from nbtrain.model import Batch, Failure, LogPage, RunSnapshot, RunState, RunStatus, WarmFacts
from nbtrain.reader import RunFacts
from nbtrain.secrets import redact_url
from nbtrain.spec import JobSpec
from nbtrain.store import RunRecord, Store
from nbtrain.view import MetricSeries, RankInfo, RunView, metric_history

__all__ = ["Run"]


class Run:
    """Handle on one distributed run. Methods are safe to call from any thread.

    ``status()``, ``wait()``, ``logs()``, ``metrics()``, ``result()``, ``cancel()``, ``failure``.
    """

    def __init__(self, record: RunRecord, store: Store, backend: Backend | None = None) -> None:
        self.record = record
        self.store = store
        self.backend: Backend = backend or get_backend(record.backend, store=store)
        self.handle = RunHandle(record.backend, record.run_id, record.handle)  # the current attempt's
        self._watcher = RunWatcher(self.backend, lambda: self.handle, self._note_status, name=f"nbtrain-watch-{self.id}")
        self._lock = self._watcher.lock
        self._tracking = TrackingLink(store, record, notice=self.notice, snapshot=lambda: self.snapshot(refresh=False),
                                      subscribe=lambda listener: self.subscribe(listener, lines=False))
        self._display = RunDisplay(self, self._lock, lambda listener: self._watcher.subscribe(listener, first=True))
        self._last_status: RunStatus | None = None  # the backend's latest answer (snapshot(refresh=False))
        self._notice_lock = threading.Lock()  # not the run's lock: see notice()

    # -- identity ---------------------------------------------------------------------------------
    @property
    def id(self) -> str:
        """The run id (e.g. ``digits-3fa9c2``)."""
        return self.record.run_id

    @property
    def spec(self) -> JobSpec:
        """The JobSpec this run was submitted with."""
        return self.record.spec

    @property
    def notebook(self) -> str | None:
        """The path of the notebook the run was submitted from, as its kernel knew it (None when unknown)."""
        path = (self.record.notebook or {}).get("path")
        return str(path) if path else None

    # -- state ------------------------------------------------------------------------------------
    @property
    def view(self) -> RunView:
        """The folded events of the run (read it under the run's lock; readers prefer :meth:`snapshot`)."""
        return self._watcher.view

    def sync(self, *, with_lines: bool = False) -> Batch:
        """Read what is new from the backend and fold it into :attr:`view` (also done by the watcher)."""
        return self._watcher.sync(with_lines=with_lines)

    def status(self) -> RunState:
        """The run's state now (asks the backend about the current attempt; records the verdict when terminal).

        STALLED while the run is running but ranks made no progress for ``--stall-after`` seconds (a hang):
        :attr:`stalled_ranks` names them and ``snapshot().detail`` says where they are stuck, with their stacks.
        """
        status = self.backend.status(self.handle)
        self._note_status(status)
        return status.state

    def _note_status(self, status: RunStatus) -> None:
        """Keep the backend's latest answer; record a terminal verdict of the current attempt in the store (once)."""
        self._last_status = status
        if status.state.terminal and self.record.state != status.state.value:
            self.sync()
            self.record.state = status.state.value
            self.record.ended = status.ended or time.time()
            failure = status.failure or self.view.failure
            self.record.failure = failure.to_dict() if failure else None
            save_verdict(self.store, self.record)

    @property
    def stalled_ranks(self) -> tuple[int, ...]:
        """The global ranks the last :meth:`status` found stalled (empty unless it returned STALLED)."""
        status = self._last_status
        return status.stalled if status is not None and status.state is RunState.STALLED else ()

    @property
    def failure(self) -> Failure | None:
        """The first failing rank and why, once the run FAILED (None otherwise)."""
        if self.status() is not RunState.FAILED:
            return None
        return Failure.from_dict(self.record.failure) if self.record.failure else Failure(reason="unknown")

    def wait(self, timeout: float | None = None, *, raise_on_failure: bool = True, progress: bool = True,
             cancel_on_interrupt: bool | None = None) -> RunState:
        """Block until the run ends (or ``timeout`` s pass: TimeoutError). Shows a status line meanwhile.

        Returns at the verdict: the run's MLflow tracking agent completes the MLflow run in the background, which
        the status line and the run's notices say once; :meth:`wait_tracking` waits for it.

        Raises RunFailedError (naming the first failing rank, its reason and traceback) when the run
        FAILED and ``raise_on_failure``.

        Ctrl-C (KeyboardInterrupt) while waiting: a cold run is cancelled (every process ended, as ``srun`` does)
        and the KeyboardInterrupt re-raised; a ``--warm`` run only stops being waited for: it goes on, and the
        KeyboardInterrupt raised says so and how to end it (``run.cancel()``, ``%nbtrain cancel RUN``, ``nbtrain
        cancel RUN``) or wait again. ``cancel_on_interrupt`` chooses either for any run.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        line = ProgressLine(enabled=progress)
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
            said = self._tracking.finish_in_background()  # never blocks: the MLflow run completes meanwhile
            if said:
                line.say(said)
        except KeyboardInterrupt:
            if cancel_on_interrupt if cancel_on_interrupt is not None else not self.spec.warm:
                line.update(f"{self.id}: interrupted — cancelling the gang…")
                self.cancel()
                raise
            line.update(f"{self.id}: interrupted — stopped waiting; the run goes on")
            raise KeyboardInterrupt(self._still_running()) from None
        finally:
            line.close()
        self._display.refresh()
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

    def _still_running(self) -> str:
        """What a Ctrl-C that only stopped the wait says: the run goes on, how to end it or wait again."""
        warm = self._warm_facts()
        where = f" on warm gang {warm.gang}" if warm is not None and warm.gang else ""
        return (f"stopped waiting for run {self.id}; it is still running{where}. End it with run.cancel(), "
                f"%nbtrain cancel {self.id} or `nbtrain cancel {self.id}` (Stop in its monitor); run.wait() waits "
                "again.")

    def _progress_text(self, state: RunState) -> str:
        view = self.view
        steps = [info.last_step for info in view.ranks.values() if info.last_step is not None]
        step = f" step {max(steps)}" + (f"/{view.total}" if view.total else "") if steps else ""
        started = view.started or self.record.created
        elapsed = time.time() - started if not state.terminal else (view.ended or time.time()) - started
        metrics = ", ".join(f"{k}={v:.4g}" for k, v in list(view.last_metrics(0).items())[:3])
        if state is RunState.STALLED and self.stalled_ranks:
            step += f" (rank{'s' if len(self.stalled_ranks) > 1 else ''} {', '.join(map(str, self.stalled_ranks))} stuck)"
        return f"{self.id}: {state.value}{step} ({elapsed:.0f} s, {len(view.ranks)}/{self.spec.world_size} ranks up){' ' + metrics if metrics else ''}"

    # -- data -------------------------------------------------------------------------------------
    def logs(self, rank: int = 0, *, tail: int | None = None, attempt: int | None = None) -> str:
        """Output of one global rank (stdout and stderr, C-level included), oldest first; ``tail``: the last N lines.

        ``attempt`` None is the current attempt. For large logs read pages with :meth:`log_page`.
        """
        self._check_rank(rank)
        return "\n".join(self.backend.logs(self.handle, rank, tail=tail, attempt=attempt))

    def log_page(self, rank: int, start: int, limit: int, *, attempt: int | None = None) -> LogPage:
        """Up to ``limit`` lines of ``rank`` from line ``start`` (negative: from the end); reads by seeking."""
        self._check_rank(rank)
        return self.backend.log_page(self.handle, rank, start, limit, attempt=attempt)

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.spec.world_size:
            raise ValueError(f"rank {rank} does not exist; this run has ranks 0-{self.spec.world_size - 1}.")

    def metrics(self, rank: int = 0) -> dict[str, list[tuple[int, float]]]:
        """Every metric ``rank`` reported so far: ``{name: [(step, value), ...]}`` by step, in full.

        Read from the run's event files (the monitor keeps only a decimated series in memory). Across
        attempts, points of a later attempt replace those of an earlier one at the same step.
        """
        return metric_history(self.backend.events(self.handle, follow=False), rank)

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
        while the run is still going. Returns this handle, now following the new attempt.
        """
        return self.relaunch(self.record.bundle_digest, kind="resume")

    def plan_resume(self, bundle_digest: str | None = None) -> Plan:
        """The plan of the next attempt (``--dry-run`` of a resume): nothing is launched or recorded."""
        state = self.status()
        if not state.terminal:
            raise NbtrainError(f"run {self.id} is still {state.value}; wait for it or cancel it before resuming.")
        digest = bundle_digest or self.record.bundle_digest
        bundle_dir = launch.bundle_dir_of(self.store, digest, self.id)
        attempt = launch.next_attempt(self.record, max([self.view.attempt, *self.view.attempts, -1]))
        return self.backend.plan(self.spec, str(bundle_dir), digest, self.id, attempt=attempt)

    def relaunch(self, bundle_digest: str, *, kind: str) -> Run:
        """Launch a new attempt of this run with ``bundle_digest`` (``--resume RUN`` passes the cell's new bundle)."""
        plan = self.plan_resume(bundle_digest)
        self.handle = launch.start_attempt(self.store, self.backend, self.record, plan, kind=kind)
        self.start_tracking()
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

    def cancel(self, reason: str | None = None) -> None:
        """End every process of the run (idempotent); returns once the run is terminal.

        ``reason``: who cancels and why (a sweep stopping a trial early), kept in the run's record (before the
        processes end, so every reader's verdict carries it) and shown by :meth:`summary`; a run that had already
        ended keeps its own verdict and gets no reason.
        """
        if reason is not None and not self.status().terminal:
            self._save_field("cancel_reason", reason)
        self.backend.cancel(self.handle)
        self.status()

    # -- watcher ----------------------------------------------------------------------------------
    def subscribe(self, listener: Callable[[Batch], None], *, lines: bool = True, watch: bool = True) -> None:
        """Call ``listener(batch)`` from the watcher thread for everything new (events, and lines if ``lines``).

        Listeners must not print or display (output would land in whatever cell runs then). ``watch=False``:
        no watcher thread is started; the listener is called by this handle's own reads (``sync``, ``wait``).
        """
        self._watcher.subscribe(listener, lines=lines)
        if watch:
            self.watch()

    def start_tracking(self) -> None:
        """Make sure the run's MLflow tracking agent runs (nothing with tracking off, or when MLflow has it all);
        called at submit, attach and resume: an agent that died is replaced. Its problems become notices."""
        self._tracking.start()

    def wait_tracking(self, timeout: float | None = None) -> None:
        """After the run ended: wait (at most ``timeout`` s, default 60) until its MLflow tracking agent has
        completed the MLflow run (a problem it reports becomes a notice); at once with tracking off."""
        self._tracking.wait(timeout)

    def close(self) -> None:
        """Stop following the run in this process (the run goes on, and so does its MLflow tracking agent)."""
        self.stop_watching()

    def release(self, timeout_s: float = 10.0) -> None:
        """Stop following the run in this process and the backend's background work here (log mirrors), within
        ``timeout_s`` (the tracking agent, on exit); the run goes on: another process takes its following over."""
        self.stop_watching()
        self.backend.close(timeout_s)

    def watch(self) -> None:
        """Start the single background watcher of this handle (no-op if running or the run ended)."""
        self._watcher.start()

    def stop_watching(self) -> None:
        """Stop the watcher thread (the run itself goes on)."""
        self._watcher.stop()

    # -- the read interface (what the widget, tracking, the server and the CLI use) -----------------
    def cursor(self) -> RunCursor:
        """A fresh cursor over every event and line of the run, from the beginning."""
        return self.backend.cursor(self.handle)

    def facts(self) -> RunFacts:
        """The record's facts as this handle knows them (no I/O): identity, bundle, origin, MLflow run id."""
        record = self.record
        return RunFacts(run_id=record.run_id, backend=record.backend, bundle_digest=record.bundle_digest,
                        created=record.created, submitted_from=MappingProxyType(dict(record.notebook or {})),
                        tracking_run_id=record.tracking_run_id)

    def run_dir(self) -> Path:
        """The run's directory in the store (the tracking ledger and lock, the attempts' files)."""
        return self.store.run_dir(self.id)

    def bundle_dir(self) -> Path:
        """The directory of the current attempt's bundle in the store (may be gone)."""
        return self.store.bundles / self.record.bundle_digest

    def log_file(self, rank: int, attempt: int) -> Path:
        """Where the store keeps ``rank``'s log of ``attempt`` (absent on backends without a shared disk)."""
        return self.store.attempt_dir(self.id, attempt) / "logs" / f"rank-{rank}.log"

    def link_tracking(self, mlflow_run_id: str) -> None:
        """Keep the MLflow run id in the run's record as it is on disk now (not this handle's older copy: another
        process, e.g. the kernel that launched the run, may have saved it since)."""
        self._save_field("tracking_run_id", mlflow_run_id)

    def _save_field(self, name: str, value: object) -> None:
        """Set ``name`` on this handle's record and save it into the record as it is on disk now (not this
        handle's older copy: another process, e.g. the kernel that launched the run, may have saved it since)."""
        setattr(self.record, name, value)
        try:
            record = self.store.load(self.id)
        except Exception:  # noqa: BLE001 - unreadable: this handle's copy is the best there is
            record = self.record
        setattr(record, name, value)
        self.store.save(record)

    def ranks(self) -> Mapping[int, RankInfo]:
        """A copy of what the events read so far say about each rank of the current attempt (no I/O)."""
        with self._lock:
            return {r: dataclasses.replace(i, env=dict(i.env)) for r, i in self.view.ranks.items()}

    def metric_series(self, rank: int = 0) -> Mapping[str, list[tuple[int, int, float]]]:
        """A copy of ``rank``'s metric series read so far, ``{name: [(attempt, step, value), ...]}`` (bounded,
        decimated like the monitor's; no I/O). :meth:`metrics` reads every point from the backend."""
        with self._lock:
            series: dict[str, MetricSeries] = self.view.metrics.get(rank, {})
            return {name: list(points) for name, points in series.items()}

    def notice(self, message: str) -> None:
        """Show ``message`` with the run's notices in this process (e.g. a reader's own problem), once.

        Never waits for the run's lock: MLflow forwarding's thread calls it while the watcher, holding
        that lock, may be waiting for the same thread (the end-of-run flush).
        """
        with self._notice_lock:
            if message not in self.view.notices:
                self.view.notices.append(message)

    def tracking_url(self) -> str | None:
        """The run's "Open in MLflow" link; None when there is none (not tracked yet, a local MLflow store).

        For display (the monitor, REST, the CLI): credentials in the tracking URI never appear in it.
        """
        try:
            from nbtrain.tracking.links import tracking_url
        except ImportError:
            return None
        try:
            url = tracking_url(self.record, store=self.store)
        except Exception:  # noqa: BLE001 - a link is optional: an unreadable ledger means no link
            return None
        return None if url is None else redact_url(url)

    def snapshot(self, *, refresh: bool = True) -> RunSnapshot:
        """An immutable picture of the run now (state from the backend, the rest from the events read so far).

        ``refresh=False``: no backend call and no read, the picture from the backend's latest answer (the
        watcher asks ~10 times a second) and the events this handle has read. Listeners must pass it: they run
        on the watcher thread inside a read, and a refreshing snapshot would read again and call them again.
        """
        asked: RunStatus | None = None
        if refresh:
            asked = self.backend.status(self.handle)
            self._note_status(asked)
            self.sync()
        with self._lock:
            view = self.view
            # never asked yet: what the events say
            status = asked or self._last_status or RunStatus(view.state, view.attempt, view.started, view.ended,
                                                             view.failure)
            steps = [i.last_step for i in view.ranks.values() if i.last_step is not None]
            failure = status.failure or view.failure if status.state is RunState.FAILED else None
            # what the Resume buttons offer: a run that stopped early and left a checkpoint to go on from
            can_resume = status.state in (RunState.FAILED, RunState.CANCELLED) and bool(view.checkpoints)
            return RunSnapshot(
                run_id=self.id, name=self.spec.name, backend=self.record.backend, state=status.state,
                attempt=max(status.attempt, view.attempt), nodes=self.spec.nodes, procs=self.spec.procs,
                world_size=self.spec.world_size, created=self.record.created,
                started=view.started or status.started, ended=status.ended or view.ended,
                step=max(steps) if steps else None, total=view.total, failure=failure,
                can_resume=can_resume, notices=tuple(view.notices),
                last_metrics=view.last_metrics(0), detail=status.detail, warm=self._warm_facts(),
            )

    def _warm_facts(self) -> WarmFacts | None:
        """The current attempt's warm gang as its supervisor's notices tell it (None: a cold run; under the lock)."""
        if not self.spec.warm:
            return None
        facts = self.view.warm
        return WarmFacts(gang=str(facts.get("gang") or ""), generation=int(facts.get("generation") or 0),
                         recycled=str(facts.get("recycled") or ""))

    # -- display ----------------------------------------------------------------------------------
    def monitor(self) -> Any:
        """The live monitor widget of this run (created once; fed by the watcher thread)."""
        return self._display.monitor()

    def show(self) -> None:
        """Display the monitor in the current cell (main thread only); ``wait`` refreshes it at the end."""
        self._display.show()

    def __repr__(self) -> str:
        # no I/O here: the last state this handle recorded (status() asks the backend)
        return f"<Run {self.id} {self.spec.nodes}x{self.spec.procs} {self.record.backend}: {self.record.state}>"

    def summary(self) -> str:
        """Readable multi-line summary: state, world size, duration, last metrics, failure."""
        return summary_text(self)
