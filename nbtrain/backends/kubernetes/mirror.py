"""Follow one attempt on the cluster and mirror it into the store (background threads, bounded).

The notebook is not a controller: a :class:`Mirror` lives in whichever process watches the run (the
kernel's Run watcher, ``attach``, the CLI), one process at a time (``mirror.lock``), and stops when
the run has a verdict and its logs are copied. Its threads, one module each, share a
:class:`~.mirrorstate.MirrorState`:

- two watches (:mod:`.watches`, not polling): the run's pods by label, and the workload by name. Each resumes from
  its last resourceVersion when the stream drops, and lists again on 410 Gone;
- up to ``log_streams`` followers of pod logs (:mod:`.followers`; rank 0 and failing pods first; a failing pod takes
  the slot of a healthy one). Logs are read with timestamps; a follower that loses its stream asks again
  from the last copied line's timestamp (``sinceTime``) and skips the lines it already copied at that
  timestamp (kept per pod in mirror.json, see :mod:`.logresume`), so no line is repeated and none is
  lost unless the kubelet rotated it away first, which a NOTICE then says;
- a coordinator (:mod:`.coordinator`, with :mod:`.queueing` for Kueue) that turns what the watches show into STATE/NOTICE events and, once the workload
  has ended and the logs are drained (or ``DRAIN_S`` passed), the verdict (with the first failure).

Pod logs are untrusted (the training code prints its data): a log line is an event only if it carries a
valid tag under the attempt's event key (see :mod:`.lines`). The key comes from ``event_key``, called
once the lock is held; without it every line stays log text and a NOTICE says why.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from nbtrain.backends.kubernetes.api import KubeApi
from nbtrain.backends.kubernetes.coordinator import Coordinator
from nbtrain.backends.kubernetes.followers import LogFollowers
from nbtrain.backends.kubernetes.lines import Expect
from nbtrain.backends.kubernetes.mirrorstate import MirrorState
from nbtrain.backends.kubernetes.target import Target
from nbtrain.backends.kubernetes.watches import Watches
from nbtrain.errors import NbtrainError
from nbtrain.model import RunStatus

__all__ = ["Mirror", "Target"]


class Mirror:
    """See the module docstring. Create, then :meth:`start` (False: another process mirrors)."""

    def __init__(self, api: KubeApi, target: Target, root: Path, *, event_key: Callable[[], bytes],
                 log_streams: int = 8) -> None:
        self.t = target
        self._event_key = event_key  # raises NbtrainError (saying why) when the key cannot be had
        self._state = MirrorState(api, target, root)
        self._watches = Watches(self._state)
        self._followers = LogFollowers(self._state, log_streams)
        self._coordinator = Coordinator(self._state, self._watches, self._followers)
        self._threads: list[threading.Thread] = []
        self._finished = threading.Event()

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> bool:
        """Take the attempt's lock and start the threads; False when another process holds it."""
        s = self._state
        if not s.files.try_lock():
            return False
        s.files.reserve()
        s.open_output(self.t.notices)
        try:
            s.expect = Expect(self._event_key(), self.t.attempt, self.t.world)
        except NbtrainError as error:
            s.notice(f"nbtrain has no event key for attempt {self.t.attempt} of run {self.t.run_id} ({error}): "
                     "the pods' event lines cannot be authenticated, so they stay log text and this run's "
                     "metrics, rank errors and result are not known here")
        loops: list[tuple[str, Callable[[], None]]] = [
            ("pods", self._watches.pods), ("owner", self._watches.owner), ("main", self._coordinate)]
        for label, body in loops:
            thread = threading.Thread(target=s.guard(body), name=f"nbtrain-k8s-{label}-{self.t.run_id}", daemon=True)
            self._threads.append(thread)
            thread.start()
        return True

    def _coordinate(self) -> None:
        try:
            self._coordinator.run()
        finally:
            self._finished.set()

    @property
    def alive(self) -> bool:
        """Still following the run (threads running)."""
        return not self._finished.is_set()

    @property
    def verdict(self) -> RunStatus | None:
        """The attempt's verdict once the mirror reached one."""
        with self._state.lock:
            return self._state.verdict

    def stop(self) -> None:
        """Stop every thread and close every stream (the run itself goes on)."""
        s = self._state
        s.stop.set()
        s.wake.set()
        with s.lock:
            streams = list(s.streams)
        for stream in streams:
            stream.close()

    def join(self, timeout: float) -> None:
        """Wait (bounded) for the threads to end after :meth:`stop`."""
        deadline = time.monotonic() + timeout
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))

    def request_cancel(self) -> None:
        """Record that the user cancelled; the verdict will be CANCELLED once the pods are gone."""
        self._state.files.request_cancel()
        self._state.wake.set()

    def status(self) -> RunStatus:
        """The verdict, or the live state with its detail."""
        return self._state.status()

    def wait_drained(self, timeout: float, *, finished_only: bool = False) -> None:
        """Wait (bounded) until the logs of every started (``finished_only``: ended) pod are copied."""
        s = self._state
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.alive:
            with s.lock:
                listed = s.pods_listed
                infos = s.pod_infos()
            pending = [uid for uid, info in infos.items() if (info.terminated if finished_only else info.started)
                       and not s.files.is_complete(uid)]
            if listed and not pending:
                return
            time.sleep(0.1)
