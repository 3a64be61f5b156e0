"""The two watches of a mirror (see :mod:`.mirror`): the attempt's pods by label, and its workload by name.

Not polling: each resumes from its last resourceVersion when the stream drops, and lists again on 410 Gone
(:func:`.api.watch_until`). Each change is stored in the :class:`~.mirrorstate.MirrorState` and wakes the
coordinator. How the workload ended is copied into the store the moment the API says it (``status.json``'s
``workload``), so the run's outcome outlives the workload.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nbtrain.backends.kubernetes.api import watch_until
from nbtrain.backends.kubernetes.mirrorstate import MirrorState
from nbtrain.backends.kubernetes.podstate import OwnerState, owner_state
from nbtrain.model import RunState

__all__ = ["WATCH_TIMEOUT_S", "Watches"]

WATCH_TIMEOUT_S = 45  # the server ends each watch after this; we resume from the last resourceVersion


class Watches:
    """The pods watch and the workload watch of one mirror (each :meth:`pods` / :meth:`owner` is a thread's body)."""

    def __init__(self, state: MirrorState) -> None:
        self.s = state

    def pods(self) -> None:
        """Watch the attempt's pods until the mirror stops."""
        self._loop("Pod", self._on_pods_list, self._on_pod_event, label=self.s.t.selector)

    def owner(self) -> None:
        """Watch the attempt's workload until the mirror stops."""
        self._loop(self.s.t.kind, self._on_owner_list, self._on_owner_event, field=f"metadata.name={self.s.t.name}")

    def owner_now(self) -> OwnerState:
        """The workload as the API shows it; once it is gone, as it was when nbtrain last saw it end."""
        s = self.s
        owner = owner_state(s.owner, s.t.flavor)
        seen = s.workload_outcome
        if not owner.exists and seen is not None:
            return OwnerState(exists=False, outcome=RunState(seen["outcome"]), reason=str(seen.get("reason") or ""),
                              message=str(seen.get("message") or ""), deadline=bool(seen.get("deadline")))
        return owner

    def _loop(self, kind: str, on_list: Callable[[list[dict[str, Any]]], None],
              on_event: Callable[[str, dict[str, Any]], None], *, label: str | None = None,
              field: str | None = None) -> None:
        s = self.s

        def changed(handler: Callable[..., None]) -> Callable[..., None]:
            def call(*args: Any) -> None:
                handler(*args)
                s.wake.set()
            return call

        watch_until(s.api, kind, s.t.namespace, label=label, field=field, timeout_s=WATCH_TIMEOUT_S,
                    on_list=changed(on_list), on_event=changed(on_event), stop=s.stop,
                    on_error=s.problem, streams=(s.streams, s.lock))

    def _on_pods_list(self, items: list[dict[str, Any]]) -> None:
        s = self.s
        with s.lock:
            fresh = {str(p["metadata"].get("uid") or p["metadata"]["name"]): p for p in items}
            for uid in set(s.pods) - set(fresh):
                s.deleted.add(uid)  # deleted while we were not watching
            s.pods.update(fresh)
            s.pods_listed = True

    def _on_pod_event(self, kind: str, obj: dict[str, Any]) -> None:
        s = self.s
        uid = str(obj["metadata"].get("uid") or obj["metadata"]["name"])
        with s.lock:
            s.pods[uid] = obj
            if kind == "DELETED":
                s.deleted.add(uid)

    def _on_owner_list(self, items: list[dict[str, Any]]) -> None:
        with self.s.lock:
            self.s.owner = items[0] if items else None
            self.s.owner_listed = True
        self._keep_outcome()

    def _on_owner_event(self, kind: str, obj: dict[str, Any]) -> None:
        with self.s.lock:
            self.s.owner = None if kind == "DELETED" else obj
        self._keep_outcome()

    def _keep_outcome(self) -> None:
        """Copy how the workload ended into the store (status.json's ``workload``) the moment the API says it, so
        the run's outcome outlives the workload: a Job collected by its TTL before the verdict (the notebook's
        kernel died meanwhile) is judged by what it said, never "deleted before it finished"."""
        s = self.s
        with s.lock:
            state = owner_state(s.owner, s.t.flavor)
            if state.outcome is None or s.workload_outcome is not None:
                return
            s.workload_outcome = {"outcome": state.outcome.value, "reason": state.reason, "message": state.message,
                                  "deadline": "yes" if state.deadline else ""}
        s.write_status()
