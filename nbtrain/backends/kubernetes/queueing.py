"""What a mirror reads of Kueue for a ``--queue`` run (see :mod:`.mirror`): why its workload waits, its place in
line, and whether Kueue evicted it after its pods had started.

Read from the run's Kueue Workload (found by the label Kueue puts on it: the workload's uid) at most every
``KUEUE_EVERY_S`` while the run waits, with its position where the visibility API answers. What cannot be read
(no permission, no Kueue) is not asked again and changes nothing the run shows.
"""

from __future__ import annotations

import time

from nbtrain.backends.kubernetes.errors import KubeApiError
from nbtrain.backends.kubernetes.kueue import JOB_UID_LABEL, Position, QueueView, pending_position, queue_view
from nbtrain.backends.kubernetes.mirrorstate import MirrorState
from nbtrain.backends.kubernetes.podstate import Live, OwnerState
from nbtrain.errors import NbtrainError
from nbtrain.model import RunState

__all__ = ["KUEUE_EVERY_S", "KueueReader"]

KUEUE_EVERY_S = 5.0  # while a --queue run waits: one read of its Kueue Workload (and its position) this often at most


class KueueReader:
    """The Kueue side of one mirror (used by its coordinator thread only)."""

    def __init__(self, state: MirrorState) -> None:
        self.s = state
        self.preempted = ""  # Kueue evicted the workload after its pods had started: "REASON: message"
        self.shown = ""  # the Kueue detail last written to status.json
        self._last_check = 0.0
        self._view: QueueView | None = None  # the latest reading of the run's Kueue Workload
        self._off: set[str] = set()  # "workload", "position": not readable here (no permission, no API)

    def with_kueue(self, owner: OwnerState, live: Live) -> Live:
        """``live`` with Kueue's own reason while a ``--queue`` run's workload is suspended (waiting for admission, or
        evicted and waiting again): read from its Workload, at most every ``KUEUE_EVERY_S``, with the run's place in
        line where the visibility API answers. What cannot be read (no permission, no Kueue) leaves ``live`` as it is."""
        s = self.s
        if not s.t.queue or not owner.suspended or live.state is not RunState.QUEUED:
            return live
        now = time.monotonic()
        if now - self._last_check >= KUEUE_EVERY_S:
            self._last_check = now
            self._view = self.read()
        view = self._view
        if view is None:
            return live
        if view.evicted:
            with s.lock:
                ran = any(s.info(obj).started for obj in s.pods.values())
            if ran:  # the gang had started: its pods were ended (the run fails, saying why: see the coordinator)
                self.preempted = view.evicted
            else:
                s.notice(f"Kueue evicted the workload ({view.evicted}); it waits to be admitted again")
        return Live(RunState.QUEUED, view.detail, live.notices)

    def eviction(self, owner: OwnerState) -> str:
        """Kueue's "REASON: message" when it evicted this ``--queue`` run's workload (suspended it again: its pods were
        ended, which is why they failed), else ""."""
        if not self.s.t.queue or not owner.suspended:
            return ""
        view = self.read()
        return view.evicted if view is not None else ""

    def read(self) -> QueueView | None:
        """The run's Kueue Workload (found by the label Kueue puts on it: the workload's uid), read once."""
        s = self.s
        with s.lock:
            uid = str(((s.owner or {}).get("metadata") or {}).get("uid") or "")
        if not uid or "workload" in self._off or not s.t.queue:
            return None
        try:
            items, _ = s.api.list_items("Workload", s.t.namespace, label_selector=f"{JOB_UID_LABEL}={uid}")
        except KubeApiError as error:
            if error.status in (403, 404):  # no permission to read Workloads, or no Kueue: say what we said before
                self._off.add("workload")
            return None
        except NbtrainError:
            return None
        if not items:
            return None
        workload = items[0]
        position: Position | None = None
        if "position" not in self._off:
            try:
                summary = s.api.pending_workloads(s.t.namespace, s.t.queue)
                position = pending_position(summary, str(workload["metadata"].get("name") or ""))
            except KubeApiError as error:
                if error.status in (403, 404, 503):  # not installed (or not served), or not allowed: no position
                    self._off.add("position")
            except NbtrainError:
                pass
        return queue_view(workload, queue=s.t.queue, position=position)
