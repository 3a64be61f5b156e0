"""Cooperative Stop at a step boundary, for warm ranks (stdlib; torch's TCPStore imported only when enabled).

A warm run's Stop (``run.cancel()``, the monitor's Stop) first asks the ranks to stop between two steps, so the
gang ends clean and stays warm; only a rank that reaches no step boundary in time is killed. The request travels
through the generation's rendezvous store, held by the warm gang's agent (``NBTRAIN_COOPERATIVE_STOP=host:port``,
set only for warm ranks): never through the user's process group, which may be the very thing that is stuck.

The step boundary is a metric report (``accelerator.log``/``nbtrain.log``: the step the monitor shows, where
``NBTRAIN_MAX_STEPS`` also stops). At each one a rank checks the store (one round trip). The first rank that
finds ``nbtrain/stop`` set proposes to stop after the next step, ``nbtrain/stop_step`` = its step + 1; the first
proposal wins (``compare_set``) and every rank stops once its own step reaches it, leaving its code with exit
code 0 (:class:`StopAtStep`). Ranks that share a collective per step are at most one boundary apart and a rank
cannot pass boundary k+1 before its peers passed boundary k, so each rank sees the proposal no later than the
step it names: none waits in a collective its peers never enter. A rank that reports no metrics, or is blocked
(a collective whose peer died, data loading), reaches no boundary; the supervisor kills it after the grace period.
"""

from __future__ import annotations

import os
import threading
from typing import Any

__all__ = ["ENV_COOPERATIVE_STOP", "STEP_KEY", "STOP_KEY", "StopAtStep", "at_step", "connect"]

ENV_COOPERATIVE_STOP = "NBTRAIN_COOPERATIVE_STOP"
STOP_KEY = "nbtrain/stop"
STEP_KEY = "nbtrain/stop_step"
CONNECT_TIMEOUT_S = 10.0

_lock = threading.Lock()
_store: Any = None
_stop_step: int | None = None
_disabled = False


class StopAtStep(SystemExit):
    """Raised out of the step report where a cooperative Stop ends this rank: its code ends with exit code 0."""

    def __init__(self, step: int) -> None:
        super().__init__(0)
        self.step = step


def connect() -> None:
    """Connect to the generation's store in the background when this is a warm rank (else nothing)."""
    if os.environ.get(ENV_COOPERATIVE_STOP):
        threading.Thread(target=_client, name="nbtrain-stop", daemon=True).start()


def _client() -> Any:
    """The store client (made once); None when disabled or unreachable (then Stop falls back to a kill)."""
    global _store, _disabled
    with _lock:
        if _store is not None or _disabled:
            return _store
        address = os.environ.get(ENV_COOPERATIVE_STOP, "")
        host, _, port = address.rpartition(":")
        try:
            from datetime import timedelta

            from torch.distributed import TCPStore

            _store = TCPStore(host, int(port), is_master=False, wait_for_workers=False,
                              timeout=timedelta(seconds=CONNECT_TIMEOUT_S))
        except Exception:  # noqa: BLE001 - no cooperative stop; training goes on
            _disabled = True
        return _store


def at_step(step: int) -> None:
    """A step boundary of this rank (its report of ``step``): raises :class:`StopAtStep` when the run stops here."""
    global _stop_step, _disabled
    if _disabled or not os.environ.get(ENV_COOPERATIVE_STOP):
        return
    store = _client()
    if store is None:
        return
    try:
        if _stop_step is None:
            if not store.check([STOP_KEY]):
                return
            agreed = store.compare_set(STEP_KEY, "", str(step + 1))
            _stop_step = int(agreed.decode() if isinstance(agreed, bytes) else agreed)
    except Exception:  # noqa: BLE001 - the store is gone (the generation is ending): nothing to agree on
        _disabled = True
        return
    if step >= _stop_step:
        raise StopAtStep(step)
