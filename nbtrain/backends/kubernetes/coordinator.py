"""The coordinator of a mirror (see :mod:`.mirror`): one thread that turns what the watches show into STATE/NOTICE
events and, once the workload has ended and the logs are drained (or ``DRAIN_S`` passed), the verdict (with the
first failure).

Each pass builds a :class:`~nbtrain.backends.verdict.Observation` from the shared state and asks the one pure
:func:`~nbtrain.backends.verdict.decide`; the cluster-specific reasons a run fails (a missing claim, pods the
controller may not create, a Kueue eviction, a workload collected unseen) are named here.
"""

from __future__ import annotations

import time

from nbtrain.backends import triage
from nbtrain.backends.kubernetes.files import tail_lines
from nbtrain.backends.kubernetes.followers import LogFollowers
from nbtrain.backends.kubernetes.mirrorstate import MirrorState
from nbtrain.backends.kubernetes.podstate import (
    Live,
    OwnerState,
    PodInfo,
    collected_outcome,
    first_failure,
    live_state,
    missing_claim,
)
from nbtrain.backends.kubernetes.preflight import MARKER as PREFLIGHT_MARKER
from nbtrain.backends.kubernetes.queueing import KueueReader
from nbtrain.backends.kubernetes.watches import Watches
from nbtrain.backends.verdict import Cause, Clock, Observation, Rules, decide
from nbtrain.errors import NbtrainError
from nbtrain.events import EventKind
from nbtrain.model import Failure, RunState, RunStatus

__all__ = ["DRAIN_S", "RULES", "Coordinator"]

DRAIN_S = 20.0  # after the workload ended, wait this long at most for the logs before the verdict
# done_grace: every rank reported RANK_DONE: wait this long for the workload to say Complete, then end it;
# failure_settle: a rank failed: the workload's podFailurePolicy ends it within seconds; if it has not ended
# after this long, the mirror deletes it (a terminal run never leaves pods running).
RULES = Rules(done_grace_s=10.0, failure_settle_s=DRAIN_S, cancel_wait_s=45.0)
EVENTS_EVERY_S = 5.0
LAST_LINES = 40

_CREATE_REASONS = ("FailedCreate", "FailedCreatePod")
_TRAINER_FAILED = "TrainJobResourcesCreationFailed"  # Kubeflow Trainer could not apply a TrainJob's JobSet (it retries)


def _transient_create_failure(message: str) -> bool:
    """A pod creation refused for a reason that can pass (quota in use, a namespace or pod being deleted): the
    controller retries, so the run keeps waiting. Anything else (Pod Security, a webhook, an invalid pod) ends it."""
    text = message.lower()
    return "exceeded quota" in text or "is being terminated" in text or "object is being deleted" in text


class Coordinator:
    """The coordinator thread of one mirror (:meth:`run` is its body)."""

    def __init__(self, state: MirrorState, watches: Watches, followers: LogFollowers) -> None:
        self.s = state
        self.watches = watches
        self.followers = followers
        self.kueue = KueueReader(state)
        self._last_events_check = 0.0
        self._missing_pods = ""  # why pods cannot be created, from the workload's Events
        self._create_failed: tuple[str, str] | None = None  # (reason, message) of a refusal retrying cannot fix

    def run(self) -> None:
        """Decide until the verdict, keep copying late logs a while, then release the attempt."""
        s = self.s
        clock = Clock()
        ended_gang = False
        try:
            while not s.stop.is_set():
                s.wake.wait(0.5)
                s.wake.clear()
                with s.lock:
                    if not (s.owner_listed and s.pods_listed):
                        continue
                    owner = self.watches.owner_now()
                    infos = s.pod_infos()
                    current = [i for uid, i in infos.items() if uid not in s.deleted]
                self.followers.schedule(infos)
                decision = decide(self._observe(owner, infos, current), clock, RULES)
                clock = decision.clock
                if decision.end_gang and not ended_gang and decision.cause is not Cause.CANCELLED:
                    self._end_gang()  # a cancel already deleted the workload
                    ended_gang = True
                if decision.verdict is not None:
                    self._finish(decision.verdict, owner, list(infos.values()))
                    break
                if decision.cause is Cause.NONE:
                    self._show_live(owner, current)
            self._after_verdict()
        finally:
            s.stop.set()
            s.wake.set()
            with s.lock:
                streams = list(s.streams)
            for stream in streams:
                stream.close()
            self.followers.join(5)
            s.files.save_positions()
            s.files.release_reserve()
            s.files.release()

    def _show_live(self, owner: OwnerState, current: list[PodInfo]) -> None:
        """The live state (with why pods are missing, and Kueue's word while queued), written when it changes."""
        s = self.s
        live = live_state(owner, current, nodes=s.t.nodes, queue=s.t.queue)
        why = self._check_events(owner, current)
        live = Live(live.state, f"{live.detail}: {why}", live.notices) if why else live
        queued = self.kueue.with_kueue(owner, live)
        s.set_live(queued)
        if queued is not live and queued.detail != self.kueue.shown:
            self.kueue.shown = queued.detail
            s.write_status()  # Kueue's new word, for processes that read the status file (attach, CLI)

    def _observe(self, owner: OwnerState, infos: dict[str, PodInfo], current: list[PodInfo]) -> Observation:
        s = self.s
        with s.lock:
            done, errors = len(s.rank_done), bool(s.rank_errors)
        running = any(i.running and not i.terminated for i in current)
        if s.missing_claim is None:
            s.missing_claim = missing_claim(current)
        ended = (owner.outcome is not None or not owner.exists) and not running
        return Observation(
            now=time.monotonic(), world=s.t.world, ranks_done=done,
            rank_failed=(errors or any(i.failed for i in current) or owner.outcome is RunState.FAILED
                         or self._create_failed is not None or s.missing_claim is not None
                         or bool(self.kueue.preempted)),
            gang_ended=ended, gang_clean=ended and owner.outcome is RunState.SUCCEEDED,
            cancel_requested=s.files.cancel_requested,
            store_full=s.files.disk_full is not None,
            timed_out=False,  # the cluster enforces --timeout (activeDeadlineSeconds): the workload fails
            # drained, or the log copy made no progress for DRAIN_S (a log that cannot be fetched must not hold the
            # verdict forever; a long log that is still arriving is waited for)
            logs_drained=self.followers.drained(infos) or time.monotonic() - s.last_copy > DRAIN_S,
        )

    def _end_gang(self) -> None:
        """Delete the workload (foreground: its pods go first); a gone workload is fine."""
        t = self.s.t
        try:
            self.s.api.delete(t.kind, t.name, t.namespace, propagation="Foreground")
        except NbtrainError as error:
            if "not found" not in str(error).lower():
                self.s.problem(f"could not end the gang ({t.kind} {t.name}): {error}")

    def _finish(self, state: RunState, owner: OwnerState, infos: list[PodInfo]) -> None:
        s = self.s
        failure: Failure | None = None
        reason = ""
        if s.files.disk_full is not None and state is not RunState.CANCELLED:
            s.files.release_reserve()  # room for the verdict
            state = RunState.FAILED
            failure = Failure(reason=f"no space left on device at {s.files.disk_full} (the nbtrain store is full: "
                                     "the gang's output could not all be kept); free space there or set NBTRAIN_HOME "
                                     "to a disk with room, then resume the run")
            reason = failure.summary()
        elif state is RunState.CANCELLED:
            reason = "cancelled by the user"
        elif state is RunState.SUCCEEDED and owner.outcome is RunState.FAILED:
            reason = "every rank finished; the pods ended badly afterwards (ignored)"
        elif state is RunState.SUCCEEDED and not owner.exists and len(s.rank_done) < s.t.world:
            reason = f"the {s.t.kind} completed"
            s.notice(f"the {s.t.kind} {s.t.name} completed and was deleted (its ttlSecondsAfterFinished, or "
                     "by someone) before nbtrain copied all of its pods' logs: the outcome is the one the API "
                     "showed; logs, metrics and the result end where the copy stopped")
        elif state is RunState.FAILED:
            state, failure, reason = self._failed(owner, infos)
        retrying = s.will_retry(state)
        if retrying:
            reason = (f"{reason}; restarting from the last checkpoint on the volume (attempt {s.t.attempt + 1} of "
                      f"{s.t.restart_budget})")
        with s.lock:
            s.verdict = RunStatus(state, s.t.attempt, s.started, time.time(), failure, reason)
        if failure is not None:
            s.emit(EventKind.FAILURE, **failure.to_dict())
        s.emit(EventKind.STATE, state=state.value, reason=reason, retrying=retrying)
        s.write_status()

    def _failed(self, owner: OwnerState, infos: list[PodInfo]) -> tuple[RunState, Failure | None, str]:
        """The verdict of a FAILED decision: its state (a workload collected unseen may yet be a success), the first
        failure, and the reason shown."""
        s, t = self.s, self.s.t
        nothing_failed = not s.rank_errors and not any(i.failed for i in infos)
        evicted = self.kueue.preempted or self.kueue.eviction(owner)
        if evicted:
            failure = Failure(reason=(
                f"Kueue evicted the workload ({evicted}) while its pods ran, and the {t.kind} controller "
                f"ended them; nbtrain deleted the {t.kind} rather than run the cell again from the top when "
                "Kueue admits it again. Submit it again, or give it a --volume and --max-restarts so that a "
                "preempted run restarts from its last checkpoint"))
        elif s.missing_claim is not None and nothing_failed:
            pod, claim = s.missing_claim
            failure = Failure(reason=(
                f"pod {pod.name} cannot start: its --volume claim {claim!r} does not exist in namespace "
                f"{t.namespace} (the scheduler: {pod.unschedulable}); nbtrain deleted the {t.kind}. "
                f"Create the PersistentVolumeClaim (kubectl get pvc -n {t.namespace} lists those there) or "
                "fix --volume, then submit again"))
        elif self._create_failed is not None and nothing_failed:
            why, message = self._create_failed
            failure = Failure(reason=(
                f"the {t.kind} {t.name} could not create its pods ({why}): {message}; nbtrain deleted it. "
                "Fix what the message names (in a namespace that enforces the restricted Pod Security level, "
                "every container, including one an operator injects, needs a restricted securityContext: "
                "see docs/kubernetes.md), then submit again"))
        elif not owner.exists and owner.outcome is None and nothing_failed:
            state, why = collected_outcome(kind=t.kind, name=t.name, ttl_s=t.ttl_s,
                                           ranks_done=len(s.rank_done), world=t.world)
            if state is not RunState.FAILED:
                return state, None, why  # only a collected success
            failure = Failure(reason=why)
        else:
            failure = self._failure(owner, self._settled(owner, infos))
        return RunState.FAILED, failure, failure.summary()

    def _settled(self, owner: OwnerState, infos: list[PodInfo]) -> list[PodInfo]:
        """``infos``, or the pods as the API shows them now when the workload failed but no pod has yet: the two
        watches are separate streams, and the workload's Failed (its podFailurePolicy acting on a failed pod) can
        arrive before that pod's own update; the verdict should name the pod and why, not only the workload."""
        s = self.s
        if owner.outcome is not RunState.FAILED or s.rank_errors or any(i.failed for i in infos):
            return infos
        try:
            items, _version = s.api.list_items("Pod", s.t.namespace, label_selector=s.t.selector)
        except Exception:  # noqa: BLE001 - any API trouble: judge by what the watch brought
            return infos
        return [s.info(obj) for obj in items] or infos

    def _failure(self, owner: OwnerState, infos: list[PodInfo]) -> Failure:
        s, t = self.s, self.s.t
        elastic: dict[int, int] = {}
        node_tails: dict[int, list[str]] = {}
        for node in range(t.nodes):
            node_tails[node] = tail_lines(s.files.logs_dir / f"node-{node}.log", 400)
            elastic.update(triage.parse_elastic_failures("\n".join(node_tails[node])))
        if not s.rank_errors:  # the image lacks what the runtime needs: the preflight said what, in the pod log
            if t.world == 1:  # a gang of one: the pod's lines are rank 0's (see LogFollowers._copy)
                node_tails[0] = node_tails[0] or tail_lines(s.files.logs_dir / "rank-0.log", 400)
            for node, lines in sorted(node_tails.items()):
                said = next((line for line in lines if line.startswith(PREFLIGHT_MARKER)), None)
                if said is not None:
                    return Failure(reason=said[len(PREFLIGHT_MARKER):].strip(), node=node, exit_code=None,
                                   last_lines=tuple(lines[-LAST_LINES:]))
        last = {r: tail_lines(s.files.logs_dir / f"rank-{r}.log", LAST_LINES) for r in range(t.world)}
        for rank, lines in last.items():  # a rank that printed nothing: its pod's own output (the launcher's, the
            if not lines:                 # image's errors before any rank started) says more than nothing
                last[rank] = node_tails.get(rank // max(1, t.procs), [])[-LAST_LINES:]
        return first_failure(rank_errors=s.rank_errors, pods=infos, elastic_codes=elastic, procs=t.procs,
                             last_lines=last, owner=owner, timeout_s=t.timeout_s)

    def _after_verdict(self) -> None:
        """Keep copying logs that are still arriving for a while after the verdict."""
        s = self.s
        deadline = time.monotonic() + DRAIN_S
        while time.monotonic() < deadline and not s.stop.is_set():
            infos = s.pod_infos()
            self.followers.schedule(infos)
            if self.followers.drained(infos) and not self.followers.busy():
                return
            s.stop.wait(0.2)

    def _check_events(self, owner: OwnerState, current: list[PodInfo]) -> str:
        """Why pods are missing, when they cannot even be created (quota, Pod Security admission): that only
        shows in Warning Events, recorded by whichever controller creates them (the Job controller on the Job,
        the training operator on the PyTorchJob, the JobSet's child Jobs; Kubeflow Trainer, which retries, on a
        TrainJob whose JobSet it cannot make). Returns the latest such message ("" when pods are all there). A refusal
        that retrying cannot fix (anything but an exhausted quota) is kept in ``_create_failed``: the run then fails
        with the API's reason instead of "starting" until --timeout."""
        s = self.s
        now = time.monotonic()
        if owner.suspended or len(current) >= s.t.nodes:
            self._missing_pods = ""
            return ""
        if now - self._last_events_check < EVENTS_EVERY_S:
            return self._missing_pods
        self._last_events_check = now
        try:
            for event in s.api.warnings_about(s.t.namespace, s.t.name):
                reason, message = str(event.get("reason", "")), str(event.get("message", ""))
                if reason not in (*_CREATE_REASONS, "FailedScheduling", _TRAINER_FAILED):
                    continue
                s.notice(f"{reason}: {message}".strip())
                self._missing_pods = message
                if reason in _CREATE_REASONS and not _transient_create_failure(message):
                    self._create_failed = self._create_failed or (reason, message)
        except NbtrainError:
            pass  # events are a hint; missing permission to read them must not stop the run
        return self._missing_pods
