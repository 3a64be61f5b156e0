"""What the threads of one attempt's mirror share (see :mod:`.mirror`): the cluster objects the watches last saw,
the ranks' reports, the live state and the verdict, and the one way each of them writes the attempt's own
STATE/NOTICE events and ``status.json``.

Every field the threads both read and write is guarded by ``lock`` (an RLock); ``wake`` tells the coordinator that
something changed; ``stop`` ends every thread. Writers: the watches (``owner``, ``pods``, ``deleted``, the listed
flags, ``workload_outcome``), the log followers (``rank_errors``, ``rank_done``, ``last_copy``), the coordinator
(everything else, and ``verdict``).
"""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nbtrain.backends.kubernetes.api import KubeApi, Stream
from nbtrain.backends.kubernetes.files import AttemptFiles
from nbtrain.backends.kubernetes.lines import Expect
from nbtrain.backends.kubernetes.pod import container_name
from nbtrain.backends.kubernetes.podstate import Live, PodInfo, pod_info
from nbtrain.backends.kubernetes.target import Target
from nbtrain.events import Event, EventKind, EventWriter
from nbtrain.model import RunState, RunStatus

__all__ = ["MirrorState"]


class MirrorState:
    """The shared state of one mirror, and its event and status output (thread-safe)."""

    def __init__(self, api: KubeApi, target: Target, root: Path) -> None:
        self.api = api
        self.t = target
        self.files = AttemptFiles(root)
        self.container = container_name(target.flavor)
        self.expect = Expect(None, target.attempt, target.world)
        self.lock = threading.RLock()
        self.wake = threading.Event()
        self.stop = threading.Event()
        self.owner: dict[str, Any] | None = None
        self.owner_listed = False
        self.pods: dict[str, dict[str, Any]] = {}  # uid -> latest object (deleted ones kept, marked)
        self.deleted: set[str] = set()
        self.pods_listed = False
        self.rank_errors: dict[int, Event] = {}
        self.rank_done: set[int] = set()
        self.live = Live(RunState.STARTING, "submitted")
        self.verdict: RunStatus | None = None
        self.notices: set[str] = set()
        self.problems: set[str] = set()
        self.started: float | None = None
        self.out: EventWriter | None = None
        self.streams: set[Stream] = set()
        self.workload_outcome: dict[str, str] | None = None  # how the workload ended, as kept in status.json
        self.missing_claim: tuple[PodInfo, str] | None = None  # a pod waiting for a claim that does not exist
        self.last_copy = time.monotonic()  # when log lines were last copied into the store

    # -- reading --------------------------------------------------------------------------------
    def info(self, obj: dict[str, Any]) -> PodInfo:
        """What the mirror needs of a pod object."""
        return pod_info(obj, self.t.flavor, self.container)

    def pod_infos(self) -> dict[str, PodInfo]:
        """Every pod seen (deleted ones included), by uid."""
        with self.lock:
            return {uid: self.info(obj) for uid, obj in self.pods.items()}

    def status(self) -> RunStatus:
        """The verdict, or the live state with its detail."""
        with self.lock:
            if self.verdict is not None:
                return self.verdict
            return RunStatus(self.live.state, self.t.attempt, self.started, None, None, self.live.detail)

    def will_retry(self, state: RunState) -> bool:
        """A FAILED verdict of this attempt is followed by a new attempt (``--max-restarts``; not after a cancel, nor
        when a claim is missing: a new attempt would wait for it too)."""
        return (state is RunState.FAILED and not self.files.cancel_requested and self.missing_claim is None
                and self.t.attempt < self.t.restart_budget)

    # -- writing --------------------------------------------------------------------------------
    def guard(self, fn: Callable[[], None]) -> Callable[[], None]:
        """``fn`` for a thread: an exception becomes a problem the run shows, never a silent thread death."""
        def run() -> None:
            try:
                fn()
            except Exception as error:  # noqa: BLE001 - a mirror thread must report, never vanish silently
                self.problem(f"nbtrain's Kubernetes mirror hit an internal error: {type(error).__name__}: {error}")
        return run

    def emit(self, kind: EventKind, **data: Any) -> None:
        """Append one of the attempt's own events (a full disk is remembered for the verdict, not raised)."""
        if self.out is None:
            return
        try:
            self.out.emit(kind, **data)
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
            self.files.disk_full = self.files.disk_full or str(self.files.events_dir)

    def notice(self, message: str) -> None:
        """A NOTICE event, once per distinct message."""
        with self.lock:
            if message in self.notices:
                return
            self.notices.add(message)
        self.emit(EventKind.NOTICE, message=message)

    def problem(self, message: str) -> None:
        """An error reaching the API: shown once as a NOTICE and in the status detail."""
        with self.lock:
            self.live = Live(self.live.state, message, self.live.notices)
            first = message not in self.problems
            self.problems.add(message)
        if first:
            self.notice(message)

    def set_live(self, live: Live) -> None:
        """The run's live state: a STATE event and ``status.json`` when the state changes, its notices once."""
        if self.live.state is RunState.RUNNING and live.state is RunState.STARTING:
            live = Live(RunState.RUNNING, live.detail, live.notices)  # pods finishing: not starting again
        with self.lock:
            changed = live.state is not self.live.state
            self.live = live
        for message in live.notices:
            self.notice(message)
        if changed:
            self.emit(EventKind.STATE, state=live.state.value, reason=live.detail)
            self.write_status()

    def write_status(self) -> None:
        """Replace ``status.json`` with the state now (what other processes read)."""
        status = self.status()
        self.files.write_status({
            "state": status.state.value, "attempt": self.t.attempt, "started": status.started,
            "ended": status.ended, "failure": status.failure.to_dict() if status.failure else None,
            "detail": status.detail, "updated": time.time(), "workload": self.workload_outcome,
            "retrying": self.will_retry(status.state),
        })

    def note_rank_event(self, event: Event) -> None:
        """Remember a rank's RANK_ERROR (its first) or RANK_DONE."""
        if event.rank is None:
            return
        with self.lock:
            if event.kind is EventKind.RANK_ERROR:
                self.rank_errors.setdefault(event.rank, event)
            elif event.kind is EventKind.RANK_DONE:
                self.rank_done.add(event.rank)

    def open_output(self, notices: tuple[str, ...]) -> None:
        """Reload what the store kept of this attempt (a mirror taking over) and open its own event file."""
        kept = (self.files.read_status() or {}).get("workload")
        if isinstance(kept, dict) and kept.get("outcome") in (RunState.SUCCEEDED.value, RunState.FAILED.value):
            self.workload_outcome = {k: str(kept.get(k) or "") for k in ("outcome", "reason", "message", "deadline")}
        for event in self.files.load():
            self.note_rank_event(event)
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
            self.emit(EventKind.STATE, state=RunState.STARTING.value, reason="submitted to Kubernetes")
            self.started = time.time()
            for notice in notices:
                self.notice(notice)
