"""Follow one attempt on the cluster and mirror it into the store (background threads, bounded).

The notebook is not a controller: a :class:`Mirror` lives in whichever process watches the run (the
kernel's Run watcher, ``attach``, the CLI), one process at a time (``mirror.lock``), and stops when
the run has a verdict and its logs are copied. Its threads:

- two watches (not polling): the run's pods by label, and the workload by name. Each resumes from
  its last resourceVersion when the stream drops, and lists again on 410 Gone;
- up to ``log_streams`` followers of pod logs (rank 0 and failing pods first; a failing pod takes
  the slot of a healthy one). Logs are read with timestamps; a follower that loses its stream asks again
  from the last copied line's timestamp (``sinceTime``) and skips the lines it already copied at that
  timestamp (kept per pod in mirror.json, see :mod:`.logresume`), so no line is repeated and none is
  lost unless the kubelet rotated it away first, which a NOTICE then says;
- a coordinator that turns what the watches show into STATE/NOTICE events and, once the workload
  has ended and the logs are drained (or ``DRAIN_S`` passed), the verdict (with the first failure).

Pod logs are untrusted (the training code prints its data): a log line is an event only if it carries a
valid tag under the attempt's event key (see :mod:`.lines`). The key comes from ``event_key``, called
once the lock is held; without it every line stays log text and a NOTICE says why.
"""

from __future__ import annotations

import errno
import functools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nbtrain.backends import triage
from nbtrain.backends.kubernetes.api import KubeApi, Stream, watch_until
from nbtrain.backends.kubernetes.errors import KubeApiError
from nbtrain.backends.kubernetes.files import AttemptFiles, tail_lines
from nbtrain.backends.kubernetes.kueue import JOB_UID_LABEL, Position, QueueView, pending_position, queue_view
from nbtrain.backends.kubernetes.lines import Expect, LineSplitter
from nbtrain.backends.kubernetes.logresume import Resume
from nbtrain.backends.kubernetes.pod import container_name
from nbtrain.backends.kubernetes.podstate import (
    Live,
    OwnerState,
    PodInfo,
    collected_outcome,
    first_failure,
    follow_order,
    live_state,
    missing_claim,
    owner_state,
    pod_info,
    preemptable,
)
from nbtrain.backends.kubernetes.preflight import MARKER as PREFLIGHT_MARKER
from nbtrain.backends.kubernetes.target import Target
from nbtrain.backends.verdict import Cause, Clock, Observation, Rules, decide
from nbtrain.errors import NbtrainError
from nbtrain.events import Event, EventKind, EventWriter
from nbtrain.model import Failure, RunState, RunStatus

__all__ = ["Mirror", "Target"]

WATCH_TIMEOUT_S = 45  # the server ends each watch after this; we resume from the last resourceVersion
DRAIN_S = 20.0  # after the workload ended, wait this long at most for the logs before the verdict
# done_grace: every rank reported RANK_DONE: wait this long for the workload to say Complete, then end it;
# failure_settle: a rank failed: the workload's podFailurePolicy ends it within seconds; if it has not ended
# after this long, the mirror deletes it (a terminal run never leaves pods running).
RULES = Rules(done_grace_s=10.0, failure_settle_s=DRAIN_S, cancel_wait_s=45.0)
EVENTS_EVERY_S = 5.0
KUEUE_EVERY_S = 5.0  # while a --queue run waits: one read of its Kueue Workload (and its position) this often at most
LAST_LINES = 40


class _Follower:
    """One log-following thread, which the scheduler can ask to give its stream up."""

    def __init__(self) -> None:
        self.thread = threading.Thread()
        self.stop = threading.Event()
        self.stream: Stream | None = None

    def preempt(self) -> None:
        self.stop.set()
        if self.stream is not None:
            self.stream.close()


class Mirror:
    """See the module docstring. Create, then :meth:`start` (False: another process mirrors)."""

    def __init__(self, api: KubeApi, target: Target, root: Path, *, event_key: Callable[[], bytes],
                 log_streams: int = 8) -> None:
        self.api = api
        self.t = target
        self._event_key = event_key  # raises NbtrainError (saying why) when the key cannot be had
        self.expect = Expect(None, target.attempt, target.world)
        self.files = AttemptFiles(root)
        self.log_streams = max(1, log_streams)
        self.container = container_name(target.flavor)
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._finished = threading.Event()
        self.owner: dict[str, Any] | None = None
        self.owner_listed = False
        self.pods: dict[str, dict[str, Any]] = {}  # uid -> latest object (deleted ones kept, marked)
        self.deleted: set[str] = set()
        self.pods_listed = False
        self.followers: dict[str, _Follower] = {}
        self.rank_errors: dict[int, Event] = {}
        self.rank_done: set[int] = set()
        self.live = Live(RunState.STARTING, "submitted")
        self.verdict: RunStatus | None = None
        self.notices: set[str] = set()
        self.problems: set[str] = set()
        self.started: float | None = None
        self.out: EventWriter | None = None
        self._streams: set[Stream] = set()
        self._threads: list[threading.Thread] = []
        self._last_events_check = 0.0
        self._missing_pods = ""  # why pods cannot be created, from the workload's Events
        self._create_failed: tuple[str, str] | None = None  # (reason, message) of a refusal retrying cannot fix
        self._missing_claim: tuple[PodInfo, str] | None = None  # a pod waiting for a claim that does not exist
        self._workload_outcome: dict[str, str] | None = None  # how the workload ended, as kept in status.json
        self._last_copy = time.monotonic()  # when log lines were last copied into the store
        self._last_kueue_check = 0.0
        self._kueue: QueueView | None = None  # the latest reading of the run's Kueue Workload
        self._kueue_off: set[str] = set()  # "workload", "position": not readable here (no permission, no API)
        self._kueue_shown = ""  # the Kueue detail last written to status.json
        self._preempted = ""  # Kueue evicted the workload after its pods had started: "REASON: message"

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> bool:
        """Take the attempt's lock and start the threads; False when another process holds it."""
        if not self.files.try_lock():
            return False
        self.files.reserve()
        kept = (self.files.read_status() or {}).get("workload")
        if isinstance(kept, dict) and kept.get("outcome") in (RunState.SUCCEEDED.value, RunState.FAILED.value):
            self._workload_outcome = {k: str(kept.get(k) or "") for k in ("outcome", "reason", "message", "deadline")}
        for event in self.files.load():
            self._note_rank_event(event)
        self.out = EventWriter(self.files.events_dir / "kubernetes.jsonl", "kubernetes", attempt=self.t.attempt)
        own = self.files.own_events()
        for event in own:
            if event.kind is EventKind.STATE:
                self.live = Live(RunState(event.data["state"]), str(event.data.get("reason", "")))
                if event.data["state"] == RunState.STARTING.value and self.started is None:
                    self.started = event.time
            elif event.kind is EventKind.NOTICE:
                self.notices.add(str(event.data.get("message", "")))
        if not own:
            self._emit(EventKind.STATE, state=RunState.STARTING.value, reason="submitted to Kubernetes")
            self.started = time.time()
            for notice in self.t.notices:
                self._notice(notice)
        try:
            self.expect = Expect(self._event_key(), self.t.attempt, self.t.world)
        except NbtrainError as error:
            self._notice(f"nbtrain has no event key for attempt {self.t.attempt} of run {self.t.run_id} ({error}): "
                         "the pods' event lines cannot be authenticated, so they stay log text and this run's "
                         "metrics, rank errors and result are not known here")
        loops: list[tuple[str, Callable[[], None]]] = [
            ("pods", lambda: self._watch_loop("Pod", self._on_pods_list, self._on_pod_event, label=self.t.selector)),
            ("owner", lambda: self._watch_loop(self.t.kind, self._on_owner_list, self._on_owner_event,
                                               field=f"metadata.name={self.t.name}")),
            ("main", self._main),
        ]
        for label, target in loops:
            thread = threading.Thread(target=self._guard(target), name=f"nbtrain-k8s-{label}-{self.t.run_id}",
                                      daemon=True)
            self._threads.append(thread)
            thread.start()
        return True

    def _guard(self, fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except Exception as error:  # noqa: BLE001 - a mirror thread must report, never vanish silently
                self._problem(f"nbtrain's Kubernetes mirror hit an internal error: {type(error).__name__}: {error}")
        return run

    @property
    def alive(self) -> bool:
        """Still following the run (threads running)."""
        return not self._finished.is_set()

    def stop(self) -> None:
        """Stop every thread and close every stream (the run itself goes on)."""
        self._stop.set()
        self._wake.set()
        with self._lock:
            streams = list(self._streams)
        for stream in streams:
            stream.close()

    def join(self, timeout: float) -> None:
        """Wait (bounded) for the threads to end after :meth:`stop`."""
        deadline = time.monotonic() + timeout
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))

    def request_cancel(self) -> None:
        """Record that the user cancelled; the verdict will be CANCELLED once the pods are gone."""
        self.files.request_cancel()
        self._wake.set()

    def status(self) -> RunStatus:
        """The verdict, or the live state with its detail."""
        with self._lock:
            if self.verdict is not None:
                return self.verdict
            return RunStatus(self.live.state, self.t.attempt, self.started, None, None, self.live.detail)

    def wait_drained(self, timeout: float, *, finished_only: bool = False) -> None:
        """Wait (bounded) until the logs of every started (``finished_only``: ended) pod are copied."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.alive:
            with self._lock:
                listed = self.pods_listed
                infos = [(uid, self._info(obj)) for uid, obj in self.pods.items()]
            pending = [uid for uid, info in infos if (info.terminated if finished_only else info.started)
                       and not self.files.is_complete(uid)]
            if listed and not pending:
                return
            time.sleep(0.1)

    # -- watches --------------------------------------------------------------------------------
    def _watch_loop(self, kind: str, on_list: Callable[[list[dict[str, Any]]], None],
                    on_event: Callable[[str, dict[str, Any]], None], *, label: str | None = None,
                    field: str | None = None) -> None:
        def changed(handler: Callable[..., None]) -> Callable[..., None]:
            def call(*args: Any) -> None:
                handler(*args)
                self._wake.set()
            return call

        watch_until(self.api, kind, self.t.namespace, label=label, field=field, timeout_s=WATCH_TIMEOUT_S,
                    on_list=changed(on_list), on_event=changed(on_event), stop=self._stop,
                    on_error=self._problem, streams=(self._streams, self._lock))

    def _on_pods_list(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            fresh = {str(p["metadata"].get("uid") or p["metadata"]["name"]): p for p in items}
            for uid in set(self.pods) - set(fresh):
                self.deleted.add(uid)  # deleted while we were not watching
            self.pods.update(fresh)
            self.pods_listed = True

    def _on_pod_event(self, kind: str, obj: dict[str, Any]) -> None:
        uid = str(obj["metadata"].get("uid") or obj["metadata"]["name"])
        with self._lock:
            self.pods[uid] = obj
            if kind == "DELETED":
                self.deleted.add(uid)

    def _on_owner_list(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self.owner = items[0] if items else None
            self.owner_listed = True
        self._keep_outcome()

    def _on_owner_event(self, kind: str, obj: dict[str, Any]) -> None:
        with self._lock:
            self.owner = None if kind == "DELETED" else obj
        self._keep_outcome()

    def _keep_outcome(self) -> None:
        """Copy how the workload ended into the store (status.json's ``workload``) the moment the API says it, so
        the run's outcome outlives the workload: a Job collected by its TTL before the verdict (the notebook's
        kernel died meanwhile) is judged by what it said, never "deleted before it finished"."""
        with self._lock:
            state = owner_state(self.owner, self.t.flavor)
            if state.outcome is None or self._workload_outcome is not None:
                return
            self._workload_outcome = {"outcome": state.outcome.value, "reason": state.reason, "message": state.message,
                                      "deadline": "yes" if state.deadline else ""}
        self._write_status()

    def _owner_now(self) -> OwnerState:
        """The workload as the API shows it; once it is gone, as it was when nbtrain last saw it end."""
        owner = owner_state(self.owner, self.t.flavor)
        seen = self._workload_outcome
        if not owner.exists and seen is not None:
            return OwnerState(exists=False, outcome=RunState(seen["outcome"]), reason=str(seen.get("reason") or ""),
                              message=str(seen.get("message") or ""), deadline=bool(seen.get("deadline")))
        return owner

    # -- events out -----------------------------------------------------------------------------
    def _emit(self, kind: EventKind, **data: Any) -> None:
        if self.out is None:
            return
        try:
            self.out.emit(kind, **data)
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
            self.files.disk_full = self.files.disk_full or str(self.files.events_dir)

    def _notice(self, message: str) -> None:
        with self._lock:
            if message in self.notices:
                return
            self.notices.add(message)
        self._emit(EventKind.NOTICE, message=message)

    def _problem(self, message: str) -> None:
        """An error reaching the API: shown once as a NOTICE and in the status detail."""
        with self._lock:
            self.live = Live(self.live.state, message, self.live.notices)
            first = message not in self.problems
            self.problems.add(message)
        if first:
            self._notice(message)

    def _set_live(self, live: Live) -> None:
        if self.live.state is RunState.RUNNING and live.state is RunState.STARTING:
            live = Live(RunState.RUNNING, live.detail, live.notices)  # pods finishing: not starting again
        with self._lock:
            changed = live.state is not self.live.state
            self.live = live
        for message in live.notices:
            self._notice(message)
        if changed:
            self._emit(EventKind.STATE, state=live.state.value, reason=live.detail)
            self._write_status()

    def _write_status(self) -> None:
        status = self.status()
        self.files.write_status({
            "state": status.state.value, "attempt": self.t.attempt, "started": status.started,
            "ended": status.ended, "failure": status.failure.to_dict() if status.failure else None,
            "detail": status.detail, "updated": time.time(), "workload": self._workload_outcome,
            "retrying": self._will_retry(status.state),
        })

    def _will_retry(self, state: RunState) -> bool:
        """A FAILED verdict of this attempt is followed by a new attempt (``--max-restarts``; not after a cancel, nor
        when a claim is missing: a new attempt would wait for it too)."""
        return (state is RunState.FAILED and not self.files.cancel_requested and self._missing_claim is None
                and self.t.attempt < self.t.restart_budget)

    def _note_rank_event(self, event: Event) -> None:
        if event.rank is None:
            return
        if event.kind is EventKind.RANK_ERROR:
            self.rank_errors.setdefault(event.rank, event)
        elif event.kind is EventKind.RANK_DONE:
            self.rank_done.add(event.rank)

    # -- coordinator ----------------------------------------------------------------------------
    def _info(self, obj: dict[str, Any]) -> PodInfo:
        return pod_info(obj, self.t.flavor, self.container)

    def _observe(self, owner: OwnerState, infos: dict[str, PodInfo], current: list[PodInfo]) -> Observation:
        with self._lock:
            done, errors = len(self.rank_done), bool(self.rank_errors)
        running = any(i.running and not i.terminated for i in current)
        if self._missing_claim is None:
            self._missing_claim = missing_claim(current)
        ended = (owner.outcome is not None or not owner.exists) and not running
        return Observation(
            now=time.monotonic(), world=self.t.world, ranks_done=done,
            rank_failed=(errors or any(i.failed for i in current) or owner.outcome is RunState.FAILED
                         or self._create_failed is not None or self._missing_claim is not None or bool(self._preempted)),
            gang_ended=ended, gang_clean=ended and owner.outcome is RunState.SUCCEEDED,
            cancel_requested=self.files.cancel_requested,
            store_full=self.files.disk_full is not None,
            timed_out=False,  # the cluster enforces --timeout (activeDeadlineSeconds): the workload fails
            # drained, or the log copy made no progress for DRAIN_S (a log that cannot be fetched must not hold the
            # verdict forever; a long log that is still arriving is waited for)
            logs_drained=self._drained(infos) or time.monotonic() - self._last_copy > DRAIN_S,
        )

    def _end_gang(self) -> None:
        """Delete the workload (foreground: its pods go first); a gone workload is fine."""
        try:
            self.api.delete(self.t.kind, self.t.name, self.t.namespace, propagation="Foreground")
        except NbtrainError as error:
            if "not found" not in str(error).lower():
                self._problem(f"could not end the gang ({self.t.kind} {self.t.name}): {error}")

    def _main(self) -> None:
        clock = Clock()
        ended_gang = False
        try:
            while not self._stop.is_set():
                self._wake.wait(0.5)
                self._wake.clear()
                with self._lock:
                    if not (self.owner_listed and self.pods_listed):
                        continue
                    owner = self._owner_now()
                    infos = {uid: self._info(obj) for uid, obj in self.pods.items()}
                    current = [i for uid, i in infos.items() if uid not in self.deleted]
                self._schedule(infos)
                decision = decide(self._observe(owner, infos, current), clock, RULES)
                clock = decision.clock
                if decision.end_gang and not ended_gang and decision.cause is not Cause.CANCELLED:
                    self._end_gang()  # a cancel already deleted the workload
                    ended_gang = True
                if decision.verdict is not None:
                    self._finish(decision.verdict, owner, list(infos.values()))
                    break
                if decision.cause is not Cause.NONE:
                    continue
                live = live_state(owner, current, nodes=self.t.nodes, queue=self.t.queue)
                why = self._check_events(owner, current)
                live = Live(live.state, f"{live.detail}: {why}", live.notices) if why else live
                queued = self._with_kueue(owner, live)
                self._set_live(queued)
                if queued is not live and queued.detail != self._kueue_shown:
                    self._kueue_shown = queued.detail
                    self._write_status()  # Kueue's new word, for processes that read the status file (attach, CLI)
            self._after_verdict()
        finally:
            self.stop()
            for follower in list(self.followers.values()):
                follower.thread.join(timeout=5)
            self.files.save_positions()
            self.files.release_reserve()
            self.files.release()
            self._finished.set()

    def _after_verdict(self) -> None:
        """Keep copying logs that are still arriving for a while after the verdict."""
        deadline = time.monotonic() + DRAIN_S
        while time.monotonic() < deadline and not self._stop.is_set():
            with self._lock:
                infos = {uid: self._info(obj) for uid, obj in self.pods.items()}
            self._schedule(infos)
            if self._drained(infos) and not any(f.thread.is_alive() for f in self.followers.values()):
                return
            self._stop.wait(0.2)

    def _drained(self, infos: dict[str, PodInfo]) -> bool:
        for uid, info in infos.items():
            if not info.started and uid not in self.deleted:
                continue
            if info.started and not self.files.is_complete(uid):
                return False
        return True

    def _check_events(self, owner: OwnerState, current: list[PodInfo]) -> str:
        """Why pods are missing, when they cannot even be created (quota, Pod Security admission): that only
        shows in Warning Events, recorded by whichever controller creates them (the Job controller on the Job,
        the training operator on the PyTorchJob, the JobSet's child Jobs; Kubeflow Trainer, which retries, on a
        TrainJob whose JobSet it cannot make). Returns the latest such message ("" when pods are all there). A refusal
        that retrying cannot fix (anything but an exhausted quota) is kept in ``_create_failed``: the run then fails
        with the API's reason instead of "starting" until --timeout."""
        now = time.monotonic()
        if owner.suspended or len(current) >= self.t.nodes:
            self._missing_pods = ""
            return ""
        if now - self._last_events_check < EVENTS_EVERY_S:
            return self._missing_pods
        self._last_events_check = now
        try:
            for event in self.api.warnings_about(self.t.namespace, self.t.name):
                reason, message = str(event.get("reason", "")), str(event.get("message", ""))
                if reason not in (*_CREATE_REASONS, "FailedScheduling", _TRAINER_FAILED):
                    continue
                self._notice(f"{reason}: {message}".strip())
                self._missing_pods = message
                if reason in _CREATE_REASONS and not _transient_create_failure(message):
                    with self._lock:
                        self._create_failed = self._create_failed or (reason, message)
        except NbtrainError:
            pass  # events are a hint; missing permission to read them must not stop the run
        return self._missing_pods

    def _with_kueue(self, owner: OwnerState, live: Live) -> Live:
        """``live`` with Kueue's own reason while a ``--queue`` run's workload is suspended (waiting for admission, or
        evicted and waiting again): read from its Workload, at most every ``KUEUE_EVERY_S``, with the run's place in
        line where the visibility API answers. What cannot be read (no permission, no Kueue) leaves ``live`` as it is."""
        if not self.t.queue or not owner.suspended or live.state is not RunState.QUEUED:
            return live
        now = time.monotonic()
        if now - self._last_kueue_check >= KUEUE_EVERY_S:
            self._last_kueue_check = now
            self._kueue = self._read_kueue()
        view = self._kueue
        if view is None:
            return live
        if view.evicted:
            with self._lock:
                ran = any(self._info(obj).started for obj in self.pods.values())
            if ran:  # the gang had started: its pods were ended (the run fails, saying why: see _finish)
                self._preempted = view.evicted
            else:
                self._notice(f"Kueue evicted the workload ({view.evicted}); it waits to be admitted again")
        return Live(RunState.QUEUED, view.detail, live.notices)

    def _kueue_eviction(self, owner: OwnerState) -> str:
        """Kueue's "REASON: message" when it evicted this ``--queue`` run's workload (suspended it again: its pods were
        ended, which is why they failed), else ""."""
        if not self.t.queue or not owner.suspended:
            return ""
        view = self._read_kueue()
        return view.evicted if view is not None else ""

    def _read_kueue(self) -> QueueView | None:
        """The run's Kueue Workload (found by the label Kueue puts on it: the workload's uid), read once."""
        with self._lock:
            uid = str(((self.owner or {}).get("metadata") or {}).get("uid") or "")
        if not uid or "workload" in self._kueue_off or not self.t.queue:
            return None
        try:
            items, _ = self.api.list_items("Workload", self.t.namespace, label_selector=f"{JOB_UID_LABEL}={uid}")
        except KubeApiError as error:
            if error.status in (403, 404):  # no permission to read Workloads, or no Kueue: say what we said before
                self._kueue_off.add("workload")
            return None
        except NbtrainError:
            return None
        if not items:
            return None
        workload = items[0]
        position: Position | None = None
        if "position" not in self._kueue_off:
            try:
                summary = self.api.pending_workloads(self.t.namespace, self.t.queue)
                position = pending_position(summary, str(workload["metadata"].get("name") or ""))
            except KubeApiError as error:
                if error.status in (403, 404, 503):  # not installed (or not served), or not allowed: no position
                    self._kueue_off.add("position")
            except NbtrainError:
                pass
        return queue_view(workload, queue=self.t.queue, position=position)

    def _finish(self, state: RunState, owner: OwnerState, infos: list[PodInfo]) -> None:
        failure: Failure | None = None
        reason = ""
        if self.files.disk_full is not None and state is not RunState.CANCELLED:
            self.files.release_reserve()  # room for the verdict
            state = RunState.FAILED
            failure = Failure(reason=f"no space left on device at {self.files.disk_full} (the nbtrain store is full: "
                                     "the gang's output could not all be kept); free space there or set NBTRAIN_HOME "
                                     "to a disk with room, then resume the run")
            reason = failure.summary()
        elif state is RunState.CANCELLED:
            reason = "cancelled by the user"
        elif state is RunState.SUCCEEDED and owner.outcome is RunState.FAILED:
            reason = "every rank finished; the pods ended badly afterwards (ignored)"
        elif state is RunState.SUCCEEDED and not owner.exists and len(self.rank_done) < self.t.world:
            reason = f"the {self.t.kind} completed"
            self._notice(f"the {self.t.kind} {self.t.name} completed and was deleted (its ttlSecondsAfterFinished, or "
                         "by someone) before nbtrain copied all of its pods' logs: the outcome is the one the API "
                         "showed; logs, metrics and the result end where the copy stopped")
        elif state is RunState.FAILED:
            evicted = self._preempted or self._kueue_eviction(owner)
            if evicted:
                failure = Failure(reason=(
                    f"Kueue evicted the workload ({evicted}) while its pods ran, and the {self.t.kind} controller "
                    f"ended them; nbtrain deleted the {self.t.kind} rather than run the cell again from the top when "
                    "Kueue admits it again. Submit it again, or give it a --volume and --max-restarts so that a "
                    "preempted run restarts from its last checkpoint"))
            elif self._missing_claim is not None and not self.rank_errors and not any(i.failed for i in infos):
                pod, claim = self._missing_claim
                failure = Failure(reason=(
                    f"pod {pod.name} cannot start: its --volume claim {claim!r} does not exist in namespace "
                    f"{self.t.namespace} (the scheduler: {pod.unschedulable}); nbtrain deleted the {self.t.kind}. "
                    f"Create the PersistentVolumeClaim (kubectl get pvc -n {self.t.namespace} lists those there) or "
                    "fix --volume, then submit again"))
            elif self._create_failed is not None and not self.rank_errors and not any(i.failed for i in infos):
                why, message = self._create_failed
                failure = Failure(reason=(
                    f"the {self.t.kind} {self.t.name} could not create its pods ({why}): {message}; nbtrain deleted it. "
                    "Fix what the message names (in a namespace that enforces the restricted Pod Security level, "
                    "every container, including one an operator injects, needs a restricted securityContext: "
                    "see docs/kubernetes.md), then submit again"))
            elif not owner.exists and owner.outcome is None and not self.rank_errors and not any(i.failed for i in infos):
                state, why = collected_outcome(kind=self.t.kind, name=self.t.name, ttl_s=self.t.ttl_s,
                                               ranks_done=len(self.rank_done), world=self.t.world)
                failure = Failure(reason=why) if state is RunState.FAILED else None
            else:
                failure = self._failure(owner, self._settled(owner, infos))
            reason = failure.summary() if failure is not None else why  # None: only a collected success
        ended = time.time()
        retrying = self._will_retry(state)
        if retrying:
            reason = (f"{reason}; restarting from the last checkpoint on the volume (attempt {self.t.attempt + 1} of "
                      f"{self.t.restart_budget})")
        with self._lock:
            self.verdict = RunStatus(state, self.t.attempt, self.started, ended, failure, reason)
        if failure is not None:
            self._emit(EventKind.FAILURE, **failure.to_dict())
        self._emit(EventKind.STATE, state=state.value, reason=reason, retrying=retrying)
        self._write_status()

    def _settled(self, owner: OwnerState, infos: list[PodInfo]) -> list[PodInfo]:
        """``infos``, or the pods as the API shows them now when the workload failed but no pod has yet: the two
        watches are separate streams, and the workload's Failed (its podFailurePolicy acting on a failed pod) can
        arrive before that pod's own update; the verdict should name the pod and why, not only the workload."""
        if owner.outcome is not RunState.FAILED or self.rank_errors or any(i.failed for i in infos):
            return infos
        try:
            items, _version = self.api.list_items("Pod", self.t.namespace, label_selector=self.t.selector)
        except Exception:  # noqa: BLE001 - any API trouble: judge by what the watch brought
            return infos
        return [self._info(obj) for obj in items] or infos

    def _failure(self, owner: OwnerState, infos: list[PodInfo]) -> Failure:
        elastic: dict[int, int] = {}
        node_tails: dict[int, list[str]] = {}
        for node in range(self.t.nodes):
            node_tails[node] = tail_lines(self.files.logs_dir / f"node-{node}.log", 400)
            elastic.update(triage.parse_elastic_failures("\n".join(node_tails[node])))
        if not self.rank_errors:  # the image lacks what the runtime needs: the preflight said what, in the pod log
            if self.t.world == 1:  # a gang of one: the pod's lines are rank 0's (see _copy)
                node_tails[0] = node_tails[0] or tail_lines(self.files.logs_dir / "rank-0.log", 400)
            for node, lines in sorted(node_tails.items()):
                said = next((line for line in lines if line.startswith(PREFLIGHT_MARKER)), None)
                if said is not None:
                    return Failure(reason=said[len(PREFLIGHT_MARKER):].strip(), node=node, exit_code=None,
                                   last_lines=tuple(lines[-LAST_LINES:]))
        last = {r: tail_lines(self.files.logs_dir / f"rank-{r}.log", LAST_LINES) for r in range(self.t.world)}
        for rank, lines in last.items():  # a rank that printed nothing: its pod's own output (the launcher's, the
            if not lines:                 # image's errors before any rank started) says more than nothing
                last[rank] = node_tails.get(rank // max(1, self.t.procs), [])[-LAST_LINES:]
        return first_failure(rank_errors=self.rank_errors, pods=infos, elastic_codes=elastic, procs=self.t.procs,
                             last_lines=last, owner=owner, timeout_s=self.t.timeout_s)

    # -- log followers --------------------------------------------------------------------------
    def _schedule(self, infos: dict[str, PodInfo]) -> None:
        """Start followers for pods whose logs are not yet copied.

        At most ``log_streams`` followers of running pods at once; rank 0's pod takes a stream from
        another running pod if it must (that follower resumes later from its saved position). Pods that
        ended or are being deleted are read first, in a budget of their own (their streams end by themselves,
        and a failing rank's last words vanish with its pod: the Job controller deletes a failed gang).
        """
        with self._lock:
            alive = {uid: f for uid, f in self.followers.items() if f.thread.is_alive() and not f.stop.is_set()}
            running = {uid for uid in alive if uid in infos and not _ending(infos[uid], uid in self.deleted)}
            ending_reads = len(alive) - len(running)
            waiting = [(uid, info) for uid, info in infos.items()
                       if uid not in self.followers or not self.followers[uid].thread.is_alive()]
            waiting = [(uid, info) for uid, info in waiting
                       if (info.started or uid in self.deleted) and not self.files.is_complete(uid)]
            for uid, info in follow_order(waiting):
                ending = _ending(info, uid in self.deleted)
                if ending and ending_reads >= 2 * self.log_streams:
                    continue
                if not ending and len(running) >= self.log_streams:
                    victim = preemptable(running, infos) if info.node == 0 else None
                    if victim is None:
                        continue
                    alive[victim].preempt()
                    running.discard(victim)
                follower = _Follower()
                follower.thread = threading.Thread(target=self._guard(functools.partial(self._follow, uid, follower)),
                                                   name=f"nbtrain-k8s-log-{info.name}", daemon=True)
                self.followers[uid] = follower
                if ending:
                    ending_reads += 1
                else:
                    running.add(uid)
                follower.thread.start()

    def _follow(self, uid: str, me: _Follower) -> None:
        with self._lock:
            obj = self.pods[uid]
        info = self._info(obj)
        entry = self.files.position(uid, info.name, info.node)
        resume = Resume(entry)
        splitter = LineSplitter(self.expect)
        backoff = 0.2
        while not self._stop.is_set() and not me.stop.is_set():
            stream: Stream | None = None
            try:
                with self._lock:
                    info = self._info(self.pods[uid])
                stream = me.stream = self.api.log(info.name, self.t.namespace, self.container,
                                                  follow=not info.terminated, since_time=resume.since_time())
                with self._lock:
                    self._streams.add(stream)
                if me.stop.is_set():  # preempted while the request was on its way
                    return
                resume.new_stream()
                for batch in stream.batches():
                    fresh = resume.feed(batch)
                    self._say_gaps(info, resume)
                    if fresh:
                        self._copy(info, splitter, fresh)
                        self.files.save_positions()
                if stream.closed:
                    return
                latest = self.api.get("Pod", info.name, self.t.namespace)
                if latest is None or self._info(latest).terminated:
                    tail = stream.remainder.decode("utf-8", "replace")
                    self._copy(info, splitter, resume.feed([tail]) if tail else [], final=True)
                    self._say_gaps(info, resume)
                    entry["complete"] = True
                    self.files.save_positions()
                    self._wake.set()
                    return
                backoff = 0.2  # the stream ended while the container runs: read again, skipping what we have
            except KubeApiError as error:
                if error.status == 404:  # the pod is gone with whatever we had not read yet
                    entry["complete"] = True
                    self.files.save_positions()
                    self._wake.set()
                    return
                if error.status != 400:  # 400: the container is not running yet
                    self._problem(str(error))
            except NbtrainError as error:
                self._problem(str(error))
            except Exception:  # noqa: BLE001 - a dropped stream: read again and skip what we have
                pass
            finally:
                if stream is not None:
                    stream.close()
                    with self._lock:
                        self._streams.discard(stream)
            self._stop.wait(backoff)
            backoff = min(3.0, backoff * 2)

    def _say_gaps(self, info: PodInfo, resume: Resume) -> None:
        """A NOTICE for each stretch of the pod's log the kubelet rotated away before it was copied."""
        for gap in resume.gaps:
            self._notice(f"the kubelet rotated the log of pod {info.name} (node {info.node}) before nbtrain copied "
                         f"all of it: its output after {gap.after} and before {gap.before} is lost (the logs here go "
                         "on from the oldest line the node still keeps; a larger containerLogMaxSize on the nodes, "
                         "or a process that keeps following the run, e.g. `nbtrain logs RUN --follow`, avoids this)")
        resume.gaps.clear()

    def _copy(self, info: PodInfo, splitter: LineSplitter, lines: list[str], *, final: bool = False) -> None:
        self._last_copy = time.monotonic()
        records = [r for line in lines for r in splitter.feed(line)]
        if final:
            records += splitter.flush()
        # a gang of one runs without torchrun (accelerate's simple launcher): no rank prefixes, all rank 0
        fresh = self.files.write_records(records, node=max(info.node, 0), sole_rank=0 if self.t.world == 1 else None)
        for event in fresh:
            self._note_rank_event(event)
        if fresh:
            self._wake.set()


_CREATE_REASONS = ("FailedCreate", "FailedCreatePod")
_TRAINER_FAILED = "TrainJobResourcesCreationFailed"  # Kubeflow Trainer could not apply a TrainJob's JobSet (it retries)


def _transient_create_failure(message: str) -> bool:
    """A pod creation refused for a reason that can pass (quota in use, a namespace or pod being deleted): the
    controller retries, so the run keeps waiting. Anything else (Pod Security, a webhook, an invalid pod) ends it."""
    text = message.lower()
    return "exceeded quota" in text or "is being terminated" in text or "object is being deleted" in text


def _ending(info: PodInfo, deleted: bool) -> bool:
    """The pod's log is complete or about to be: read it now, outside the stream budget."""
    return info.terminated or info.deleting or deleted
