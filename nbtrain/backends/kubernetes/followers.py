"""The log followers of a mirror (see :mod:`.mirror`): threads that copy pods' logs into the attempt directory.

Up to ``log_streams`` followers of running pods at once (rank 0 and failing pods first; a failing pod takes the
slot of a healthy one). Logs are read with timestamps; a follower that loses its stream asks again from the last
copied line's timestamp (``sinceTime``) and skips the lines it already copied at that timestamp (kept per pod in
mirror.json, see :mod:`.logresume`), so no line is repeated and none is lost unless the kubelet rotated it away
first, which a NOTICE then says. Each copied line is split into log text and authenticated events
(:mod:`.lines`); the ranks' RANK_ERROR/RANK_DONE events are noted in the shared state.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

from nbtrain.backends.kubernetes.api import Stream
from nbtrain.backends.kubernetes.errors import KubeApiError
from nbtrain.backends.kubernetes.lines import LineSplitter
from nbtrain.backends.kubernetes.logresume import Resume
from nbtrain.backends.kubernetes.mirrorstate import MirrorState
from nbtrain.backends.kubernetes.podstate import PodInfo, follow_order, preemptable
from nbtrain.errors import NbtrainError

__all__ = ["LogFollowers"]


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


def _ending(info: PodInfo, deleted: bool) -> bool:
    """The pod's log is complete or about to be: read it now, outside the stream budget."""
    return info.terminated or info.deleting or deleted


class LogFollowers:
    """Schedules and runs the log-following threads of one mirror."""

    def __init__(self, state: MirrorState, log_streams: int) -> None:
        self.s = state
        self.log_streams = max(1, log_streams)
        self.followers: dict[str, _Follower] = {}

    def schedule(self, infos: dict[str, PodInfo]) -> None:
        """Start followers for pods whose logs are not yet copied.

        At most ``log_streams`` followers of running pods at once; rank 0's pod takes a stream from
        another running pod if it must (that follower resumes later from its saved position). Pods that
        ended or are being deleted are read first, in a budget of their own (their streams end by themselves,
        and a failing rank's last words vanish with its pod: the Job controller deletes a failed gang).
        """
        s = self.s
        with s.lock:
            alive = {uid: f for uid, f in self.followers.items() if f.thread.is_alive() and not f.stop.is_set()}
            running = {uid for uid in alive if uid in infos and not _ending(infos[uid], uid in s.deleted)}
            ending_reads = len(alive) - len(running)
            waiting = [(uid, info) for uid, info in infos.items()
                       if uid not in self.followers or not self.followers[uid].thread.is_alive()]
            waiting = [(uid, info) for uid, info in waiting
                       if (info.started or uid in s.deleted) and not s.files.is_complete(uid)]
            for uid, info in follow_order(waiting):
                ending = _ending(info, uid in s.deleted)
                if ending and ending_reads >= 2 * self.log_streams:
                    continue
                if not ending and len(running) >= self.log_streams:
                    victim = preemptable(running, infos) if info.node == 0 else None
                    if victim is None:
                        continue
                    alive[victim].preempt()
                    running.discard(victim)
                follower = _Follower()
                follower.thread = threading.Thread(target=s.guard(functools.partial(self._follow, uid, follower)),
                                                   name=f"nbtrain-k8s-log-{info.name}", daemon=True)
                self.followers[uid] = follower
                if ending:
                    ending_reads += 1
                else:
                    running.add(uid)
                follower.thread.start()

    def drained(self, infos: dict[str, PodInfo]) -> bool:
        """Every started pod's log is copied to its end."""
        for uid, info in infos.items():
            if not info.started and uid not in self.s.deleted:
                continue
            if info.started and not self.s.files.is_complete(uid):
                return False
        return True

    def busy(self) -> bool:
        """Some follower thread still runs."""
        return any(f.thread.is_alive() for f in list(self.followers.values()))

    def join(self, timeout: float) -> None:
        """Wait (``timeout`` each) for every follower thread to end (after the mirror's stop)."""
        for follower in list(self.followers.values()):
            follower.thread.join(timeout=timeout)

    def _follow(self, uid: str, me: _Follower) -> None:
        s = self.s
        with s.lock:
            info = s.info(s.pods[uid])
        entry = s.files.position(uid, info.name, info.node)
        resume = Resume(entry)
        splitter = LineSplitter(s.expect)
        backoff = 0.2
        while not s.stop.is_set() and not me.stop.is_set():
            stream: Stream | None = None
            try:
                with s.lock:
                    info = s.info(s.pods[uid])
                stream = me.stream = s.api.log(info.name, s.t.namespace, s.container,
                                               follow=not info.terminated, since_time=resume.since_time())
                with s.lock:
                    s.streams.add(stream)
                if me.stop.is_set():  # preempted while the request was on its way
                    return
                if self._read(info, stream, resume, splitter, entry):
                    return
                backoff = 0.2  # the stream ended while the container runs: read again, skipping what we have
            except KubeApiError as error:
                if error.status == 404:  # the pod is gone with whatever we had not read yet
                    self._complete(entry)
                    return
                if error.status != 400:  # 400: the container is not running yet
                    s.problem(str(error))
            except NbtrainError as error:
                s.problem(str(error))
            except Exception:  # noqa: BLE001 - a dropped stream: read again and skip what we have
                pass
            finally:
                if stream is not None:
                    stream.close()
                    with s.lock:
                        s.streams.discard(stream)
            s.stop.wait(backoff)
            backoff = min(3.0, backoff * 2)

    def _read(self, info: PodInfo, stream: Stream, resume: Resume, splitter: LineSplitter,
              entry: dict[str, Any]) -> bool:
        """Copy what ``stream`` brings; True when the follower is done (preempted, or the pod's log is complete)."""
        s = self.s
        resume.new_stream()
        for batch in stream.batches():
            fresh = resume.feed(batch)
            self._say_gaps(info, resume)
            if fresh:
                self._copy(info, splitter, fresh)
                s.files.save_positions()
        if stream.closed:
            return True
        latest = s.api.get("Pod", info.name, s.t.namespace)
        if latest is None or s.info(latest).terminated:
            tail = stream.remainder.decode("utf-8", "replace")
            self._copy(info, splitter, resume.feed([tail]) if tail else [], final=True)
            self._say_gaps(info, resume)
            self._complete(entry)
            return True
        return False

    def _complete(self, entry: dict[str, Any]) -> None:
        """The pod's log is copied as far as it will ever be."""
        entry["complete"] = True
        self.s.files.save_positions()
        self.s.wake.set()

    def _say_gaps(self, info: PodInfo, resume: Resume) -> None:
        """A NOTICE for each stretch of the pod's log the kubelet rotated away before it was copied."""
        for gap in resume.gaps:
            self.s.notice(f"the kubelet rotated the log of pod {info.name} (node {info.node}) before nbtrain copied "
                          f"all of it: its output after {gap.after} and before {gap.before} is lost (the logs here go "
                          "on from the oldest line the node still keeps; a larger containerLogMaxSize on the nodes, "
                          "or a process that keeps following the run, e.g. `nbtrain logs RUN --follow`, avoids this)")
        resume.gaps.clear()

    def _copy(self, info: PodInfo, splitter: LineSplitter, lines: list[str], *, final: bool = False) -> None:
        s = self.s
        s.last_copy = time.monotonic()
        records = [r for line in lines for r in splitter.feed(line)]
        if final:
            records += splitter.flush()
        # a gang of one runs without torchrun (accelerate's simple launcher): no rank prefixes, all rank 0
        fresh = s.files.write_records(records, node=max(info.node, 0), sole_rank=0 if s.t.world == 1 else None)
        for event in fresh:
            s.note_rank_event(event)
        if fresh:
            s.wake.set()
