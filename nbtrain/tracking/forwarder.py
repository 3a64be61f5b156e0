"""TrackingForwarder: one run's events -> one MLflow run, outside the workers.

It runs in the run's tracking agent (:mod:`nbtrain.tracking.agent`, a detached process beside the run),
not in the kernel; nothing in it depends on which process it runs in. The agent's loop calls
:meth:`TrackingForwarder.on_batch` with what it read; the forwarder keeps rank 0's and the
supervisor's events and hands them to its own thread, which does all MLflow I/O
(import, run creation, ``log_batch``, artifact upload). So a slow or unreachable tracking server never
holds the run's lock. The one wait: when the run turns terminal, ``on_batch`` waits (at most
``FINAL_WAIT_S``) for the final flush, artifacts and status.

Exactly once (see :mod:`nbtrain.tracking.ledger`): only the process holding ``runs/<id>/tracking.lock``
(``fcntl.flock``, non-blocking, released by the kernel when the process dies) forwards. It starts by
re-reading the run's events from the backend and skipping those at or below the ledger's marks, so a
forwarder that takes over after an agent (or a kernel) died misses nothing and repeats nothing. Points carry the
event's own time, so even a ``log_batch`` that succeeded just before a crash (mark not yet written)
is re-sent as identical rows, which MLflow's SQL store ignores.

The forwarder's thread never takes the run's lock and never prints; failures become one notice per kind
(``run.notice``), and the work is retried with backoff.

What it uses of the run is :class:`nbtrain.reader.TrackedRun`: ``snapshot(refresh=False)`` on the watcher
thread (state, attempt, end, failure), ``cursor()`` for the catch-up read, its own events for each attempt's
failure, ``facts()`` for the record's identity and MLflow run id; and, beyond reading, ``run_dir()`` for its
ledger and lock, ``link_tracking()`` to keep the MLflow run id in the run's record, the bundle and the log
files it uploads (:mod:`nbtrain.tracking.artifacts`).
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Any

from nbtrain.events import Event, EventKind
from nbtrain.filelock import FileLock
from nbtrain.metricpoints import event_step
from nbtrain.model import Batch, RunSnapshot, RunState
from nbtrain.secrets import redact_url
from nbtrain.tracking.artifacts import new_run_params, new_run_tags, upload_artifacts
from nbtrain.tracking.describe import config_params, dataset_tags, experiment_name, mlflow_key, worker_tags
from nbtrain.tracking.ledger import Entry, Ledger, Pending, Point, stream_key
from nbtrain.tracking.links import LEDGER_NAME, LOCK_NAME
from nbtrain.tracking.userfiles import upload, user_file

if TYPE_CHECKING:
    from nbtrain.reader import TrackedRun
    from nbtrain.tracking.sink import MlflowSink

__all__ = ["ATTEMPT_METRIC", "TrackingForwarder"]

ATTEMPT_METRIC = "nbtrain.attempt"


class TrackingForwarder:
    """Forwards one run's events to MLflow from outside the gang (works when workers cannot reach MLflow).

    - Lazily, on the first :meth:`on_batch`, creates (or finds, by its ``nbtrain.run_id`` tag) the MLflow
      run in experiment ``experiment`` (the agent passes the one the launching process chose), else
      ``--experiment``, else the notebook's name, else "nbtrain"; tracking URI =
      ``tracking_uri``, else MLflow's own (``MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db`` in the
      current directory). Params: the JobSpec (``nbtrain.*``) and the cell's captured literals. Tags:
      identity, source, git commit, versions, gang shape.
    - Metrics: rank 0's points (after a reduce every rank holds the same value) with MLflow step = the
      event's step, ``log_batch``-ed every second or 1,000 points; ``nbtrain.attempt`` marks where each
      attempt starts.
    - Terminal state: bundle, every rank's log of every attempt, failure reports, then the status
      (FINISHED, FAILED, KILLED); a resumed run is reopened (RUNNING) and finalized again.
    """

    FLUSH_POINTS = 1000
    FLUSH_S = 1.0
    FINAL_WAIT_S = 30.0
    LOCK_RETRY_S = 1.0
    SAVE_S = 0.5
    BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)

    def __init__(self, run: TrackedRun, *, tracking_uri: str | None = None, experiment: str | None = None) -> None:
        self.run = run
        self.requested_uri = tracking_uri
        self.requested_experiment = experiment
        self.error: str | None = None  # the last failure, as shown in the notice (None once it works again)
        self._dir = run.run_dir()
        self._ledger_path = self._dir / LEDGER_NAME
        self._cv = threading.Condition()
        self._inbox: list[Event] = []
        self._snap: RunSnapshot | None = None
        self._gen = 0
        self._done_gen = 0
        self._last_ok = True
        self._flush_now = False
        self._force = False  # try now even while backing off (an explicit flush, the run's end)
        self._final_seen: tuple[int, str] | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        # below: touched by the forwarder's thread only
        self._lock = FileLock(self._dir / LOCK_NAME, mode=0o644)
        self._ledger = Ledger()
        self._queued: dict[str, int] = {}
        self._marking: set[int] = set()
        self._pending = Pending()
        self._catch_up = True
        self._behind = False
        self._sink: MlflowSink | None = None
        self._uri: str | None = None
        self._retry_at = 0.0
        self._errors = 0
        self._phase = "connect"
        self._attempts: set[int] = set()
        self._failures: dict[int, dict[str, Any]] = {}  # each attempt's failure report, from its events
        self._params: dict[str, str] = {}  # init_trackers' config, logged as params before the next batch
        self._noticed: set[str] = set()

    # -- called by the watcher ---------------------------------------------------------------------
    def on_batch(self, batch: Batch) -> None:
        """Take what the watcher read (after the run folded it); never raises, never prints.

        Cheap: filters the batch and wakes the forwarder's thread. The first time the run is seen
        terminal (per attempt and verdict), waits up to ``FINAL_WAIT_S`` for the final flush,
        artifacts and status, so ``run.wait_tracking()`` returns with the MLflow run complete.
        """
        try:
            if not self.run.spec.tracking:
                return
            snap = self.run.snapshot(refresh=False)  # on the watcher thread, inside its read: no I/O
            with self._cv:
                if self._closed:
                    return
                self._inbox.extend(e for e in batch.events if e.rank in (0, None))
                self._snap = snap
                self._gen += 1
                target, wait = self._gen, False
                if snap.state.terminal:
                    self._flush_now = True
                    verdict = (snap.attempt, snap.state.value)
                    if verdict != self._final_seen:  # the run just ended: one prompt try (even when backing
                        self._final_seen = verdict  # off) and one bounded wait, never again per verdict
                        self._force = wait = True
                self._start()
                self._cv.notify_all()
            if wait:
                self._wait(target, self.FINAL_WAIT_S)
        except Exception as error:  # noqa: BLE001 - the watcher must never see tracking errors
            self.error = f"MLflow tracking: {type(error).__name__}: {error}"

    def flush(self, timeout: float | None = None) -> bool:
        """Send what is buffered now (and finalize when the run is terminal); True if all of it went."""
        with self._cv:
            if self._thread is None:
                return True
            self._gen += 1
            target = self._gen
            self._flush_now = self._force = True
            self._cv.notify_all()
        return self._wait(target, timeout)

    def close(self) -> None:
        """Flush what is buffered, give up the forwarding lock and stop the thread (idempotent).

        Waits up to ``FINAL_WAIT_S`` for that last round; a tracking server that hangs longer is left
        to the (daemon) thread, which exits when its round ends.
        """
        with self._cv:
            if self._closed:
                return
            self._closed = True
            self._gen += 1
            self._cv.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(self.FINAL_WAIT_S)
        else:
            self._release()

    @property
    def active(self) -> bool:
        """True while this forwarder holds the run's forwarding lock (it is the one sending)."""
        return self._lock.held

    @property
    def mlflow_run_id(self) -> str | None:
        """The MLflow run id, once known to this forwarder."""
        return self._ledger.mlflow_run_id or self.run.facts().tracking_run_id

    # -- the forwarder's thread ---------------------------------------------------------------------
    def _start(self) -> None:
        if self._thread is None:
            from nbtrain.tracking.sink import THREAD_PREFIX

            self._thread = threading.Thread(target=self._loop, name=f"{THREAD_PREFIX}-{self.run.id}", daemon=True)
            self._thread.start()

    def _wait(self, target: int, timeout: float | None) -> bool:
        with self._cv:
            thread = self._thread
            done = self._cv.wait_for(
                lambda: self._done_gen >= target or thread is None or not thread.is_alive(), timeout
            )
            return bool(done) and self._done_gen >= target and self._last_ok

    def _timeout(self) -> float | None:
        deadlines = []
        if self._pending.since is not None:
            deadlines.append(self._pending.since + self.FLUSH_S)
        if self._retry_at:
            deadlines.append(self._retry_at)
        return max(0.0, min(deadlines) - time.monotonic()) if deadlines else None

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not (self._inbox or self._flush_now or self._closed):
                    timeout = self._timeout()
                    if timeout is not None and timeout <= 0:
                        break
                    self._cv.wait(timeout)
                closing, gen = self._closed, self._gen
                events, self._inbox = self._inbox, []
                snap, flush, force = self._snap, self._flush_now or closing, self._force or closing
                self._flush_now = self._force = False
            try:
                ok = self._step(events, snap, flush=flush, force=force)
            except Exception as error:  # noqa: BLE001 - a bug here must not kill forwarding for good
                self._fail(error)
                ok = False
            with self._cv:
                self._done_gen = max(self._done_gen, gen)
                self._last_ok = ok
                self._cv.notify_all()
            if closing:
                self._release()
                return

    def _step(self, events: list[Event], snap: RunSnapshot | None, *, flush: bool, force: bool) -> bool:
        """One round: take the lock if needed, catch up, log what is due, finalize. False on failure.

        ``force`` tries now even while backing off after an error (an explicit flush, the run's end,
        close); otherwise work waits for the backoff and the events meanwhile come back by catch-up.
        """
        now = time.monotonic()
        closing = self._closed
        if not self._lock.held:
            ledger = Ledger.load(self._ledger_path)
            if any(not ledger.seen(e) for e in events):
                self._behind = True  # dropped here; the catch-up read brings them back
            if not self._behind and not self._unfinished(ledger, snap):
                self._retry_at = 0.0
                return True
            if closing or (now < self._retry_at and not force):
                return True
            if not self._acquire():
                self._retry_at = now + self.LOCK_RETRY_S  # another kernel forwards; take over if it dies
                return True
            self._reset(Ledger.load(self._ledger_path))
            events = []
        elif now < self._retry_at and not force:
            self._catch_up = True  # backing off: these events come back with the catch-up read
            return False
        try:
            self._ensure_run()
            if self._catch_up:
                self._phase = "read the run's events"
                self._handle(self._read_all())
                self._catch_up = self._behind = False
            self._handle(events)
            terminal = snap is not None and snap.state.terminal
            if flush or terminal or self._pending.due(max_points=self.FLUSH_POINTS, max_age_s=self.FLUSH_S):
                self._log_pending()
            self._reopen_if_resumed()
            if terminal and snap is not None and snap.attempt >= max(self._attempts, default=0):
                self._finalize(snap)
        except Exception as error:  # noqa: BLE001 - reported as a notice, retried with backoff
            self._fail(error)
            return False
        self._errors, self._retry_at, self.error = 0, 0.0, None
        return True

    def _unfinished(self, ledger: Ledger, snap: RunSnapshot | None) -> bool:
        if ledger.mlflow_run_id is None:
            return True
        if snap is None:
            return False
        done = ledger.finalized
        if snap.state.terminal:
            return not (done and int(done["attempt"]) == snap.attempt and done["state"] == snap.state.value)
        return done is not None and snap.attempt > int(done["attempt"])

    def _reset(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._queued = dict(ledger.hwm)
        self._pending.clear()
        self._marking.clear()
        self._catch_up = True

    def _fail(self, error: BaseException) -> None:
        self._errors += 1
        self._retry_at = time.monotonic() + self.BACKOFF_S[min(self._errors, len(self.BACKOFF_S)) - 1]
        self._reset(self._ledger)
        if self._ledger.mlflow_run_id is None:
            self._sink = None
        where = redact_url(self._uri or self.requested_uri or "the default tracking URI")
        detail = redact_url(str(error).strip().splitlines()[0])[:300] if str(error).strip() else ""
        self.error = (
            f"MLflow tracking of run {self.run.id} ({where}): could not {self._phase} "
            f"({type(error).__name__}{': ' + detail if detail else ''}); retrying in the background, "
            "nothing is lost (the run's events stay on disk)."
        )
        if self._phase not in self._noticed:
            self._noticed.add(self._phase)
            self.run.notice(self.error)

    # -- lock ---------------------------------------------------------------------------------------
    def _acquire(self) -> bool:
        try:
            if not self._lock.acquire(blocking=False):
                return False
        except OSError:
            return False
        self._lock.write(f"{os.getpid()}\n")
        return True

    def _release(self) -> None:
        self._lock.release()

    # -- MLflow -------------------------------------------------------------------------------------
    def _ensure_run(self) -> None:
        ledger = self._ledger
        if self._sink is not None and ledger.mlflow_run_id and self._sink.tracking_uri == ledger.tracking_uri:
            return
        from nbtrain.tracking.sink import MlflowSink, default_tracking_uri

        facts, spec = self.run.facts(), self.run.spec
        self._phase = "connect"
        existing = self._ledger.mlflow_run_id or facts.tracking_run_id
        # where an existing MLflow run lives wins over this kernel's settings (it may run elsewhere)
        uri = (self._ledger.tracking_uri if existing else None) or self.requested_uri or default_tracking_uri()
        self._uri = uri
        sink = MlflowSink(uri)
        if existing is None:
            self._phase = "create the MLflow run"
            experiment_id = sink.experiment_id(self.requested_experiment or experiment_name(spec, facts.submitted_from))
            found = sink.find_run(experiment_id, facts.run_id)
            if found is not None:
                existing, logged = found
            else:
                existing, logged = sink.create_run(experiment_id, facts.run_id, int(facts.created * 1000),
                                                   new_run_tags(self.run)), {}
            params = {k: v for k, v in new_run_params(self.run).items() if k not in logged}
            sink.log_params(existing, params)
            self._ledger.experiment_id = experiment_id
        elif self._ledger.experiment_id is None:
            self._ledger.experiment_id = str(sink.client.get_run(existing).info.experiment_id)
        self._ledger.tracking_uri, self._ledger.mlflow_run_id = uri, existing
        self._ledger.save(self._ledger_path)
        if facts.tracking_run_id != existing:
            self.run.link_tracking(existing)
        self._sink = sink

    def _read_all(self) -> list[Event]:
        """Every event of rank 0 and the supervisor from the start (a fresh cursor, read to its end)."""
        cursor = self.run.cursor()
        out: list[Event] = []
        for _ in range(100_000):
            batch = cursor.poll(max_lines=0)
            if not batch.events:
                break
            out.extend(e for e in batch.events if e.rank in (0, None))
        return out

    def _handle(self, events: list[Event]) -> None:
        for event in events:
            self._attempts.add(event.attempt)
            if event.kind is EventKind.FAILURE:  # before the marks: reports are uploaded at the end, not logged
                self._failures[event.attempt] = dict(event.data)
            key = stream_key(event)
            if event.seq <= self._queued.get(key, 0):
                continue
            self._queued[key] = event.seq
            entry = Entry(key, event.seq)
            step = event_step(event.data)  # None: a bad stored point (nbtrain.log refuses it), MLflow would too
            if event.kind is EventKind.METRIC and event.rank == 0 and step is not None:
                stamp = int(event.time * 1000)
                if event.attempt not in self._ledger.marked and event.attempt not in self._marking:
                    self._marking.add(event.attempt)
                    entry.marks = event.attempt
                    entry.points.append(Point(ATTEMPT_METRIC, float(event.attempt), stamp, step))
                for name, value in (event.data.get("values") or {}).items():
                    try:
                        entry.points.append(Point(mlflow_key(name), float(value), stamp, step))
                    except (TypeError, ValueError):
                        continue
            elif event.kind is EventKind.ENV and event.rank == 0:
                entry.tags = worker_tags(event.data)
            elif event.kind is EventKind.DATASET and event.rank == 0:
                entry.tags = dataset_tags(event.data)
            elif event.kind is EventKind.PARAMS and event.rank == 0:
                self._params.update(config_params(event.data.get("values") or {}))
            elif (file := user_file(event, self._dir)) is not None:
                entry.files.append(file)
            self._pending.add(entry)

    def _log_pending(self) -> None:
        """``log_batch`` everything pending; the marks move (in memory) after each accepted batch.

        The ledger file is rewritten at most every ``SAVE_S`` during a long backlog and at the end: a
        crash in between re-sends at most that much, as identical points (dropped by SQL stores).
        """
        assert self._sink is not None and self._ledger.mlflow_run_id is not None
        if self._params:
            self._log_params()
        self._phase = "log metrics"
        changed, saved = False, time.monotonic()
        for points, tags, entries in self._pending.chunks():
            if points or tags:
                self._sink.log(self._ledger.mlflow_run_id, points, tags=tags)
            for file in (f for entry in entries for f in entry.files):
                upload(self._sink, self._ledger.mlflow_run_id, file)
            self._ledger.commit(entries)
            changed = True
            if time.monotonic() - saved >= self.SAVE_S:
                self._ledger.save(self._ledger_path)
                changed, saved = False, time.monotonic()
        if changed:
            self._ledger.save(self._ledger_path)

    def _log_params(self) -> None:
        """``init_trackers`` config as params: new keys logged, same values skipped (params are immutable in
        MLflow: a resume that changed one is named in a notice, never an error that stops forwarding)."""
        assert self._sink is not None and self._ledger.mlflow_run_id is not None
        self._phase = "log params"
        existing = self._sink.params(self._ledger.mlflow_run_id)
        fresh = {k: v for k, v in self._params.items() if k not in existing}
        changed = sorted(k for k, v in self._params.items() if k in existing and existing[k] != v)
        if fresh:
            self._sink.log_params(self._ledger.mlflow_run_id, fresh)
        if changed:
            self.run.notice(f"init_trackers config changed {', '.join(changed)} since the MLflow run logged them; "
                            "MLflow keeps a param's first value")
        self._params.clear()

    def _reopen_if_resumed(self) -> None:
        done = self._ledger.finalized
        if done is None or max(self._attempts, default=0) <= int(done["attempt"]):
            return
        assert self._sink is not None and self._ledger.mlflow_run_id is not None
        self._phase = "reopen the resumed run"
        self._sink.set_status(self._ledger.mlflow_run_id, RunState.RUNNING.value, None)
        self._ledger.finalized = None
        self._ledger.save(self._ledger_path)

    def _finalize(self, snap: RunSnapshot) -> None:
        done = self._ledger.finalized
        if done and int(done["attempt"]) == snap.attempt and done["state"] == snap.state.value:
            self._release()  # nothing left to do: let another kernel take over a later resume
            return
        assert self._sink is not None and self._ledger.mlflow_run_id is not None
        self._phase = "upload artifacts"
        known = self._attempts | set(range(snap.attempt + 1))  # attempts are numbered 0, 1, ... with no gaps
        failure = snap.failure.to_dict() if snap.failure is not None else None
        failures = dict(self._failures)
        if snap.state is RunState.FAILED and failure is not None:
            failures.setdefault(snap.attempt, failure)  # a verdict only the backend knows has no event
        upload_artifacts(
            self._sink, self._ledger.mlflow_run_id, self.run, known_attempts=known, attempt=snap.attempt,
            state=snap.state, failure=failure, attempt_failures=failures,
            uploaded=self._ledger.uploaded, progress=lambda: self._ledger.save(self._ledger_path),
        )
        self._phase = "set the final status"
        end_ms = int(snap.ended * 1000) if snap.ended else None
        self._sink.set_status(self._ledger.mlflow_run_id, snap.state.value, end_ms)
        self._ledger.finalized = {"attempt": snap.attempt, "state": snap.state.value}
        self._ledger.save(self._ledger_path)
        self._release()
