"""The kernel's side of a run's MLflow tracking agent: make sure it runs, show its problems, and learn (in the
background) when it has completed the MLflow run.

Forwarding happens in that detached agent process (:mod:`nbtrain.tracking.agent`), never in the kernel: this side
only reads what the agent leaves (the ledger, its problems) and tells the run through ``notice``. ``Run.wait()``
returns at the verdict: the agent finishes the MLflow run in the background and the run says so once;
``Run.wait_tracking()`` waits for it (``nbtrain submit --wait`` does, so CI finds the MLflow run complete).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from nbtrain.model import Batch, RunSnapshot
from nbtrain.spec import tracking_default

if TYPE_CHECKING:
    from nbtrain.store import RunRecord, Store

__all__ = ["TrackingLink"]


class TrackingLink:
    """One run handle's link to the run's tracking agent.

    ``notice(message)`` shows a message with the run's notices (any thread); ``subscribe(listener)`` adds a
    watcher listener (events only); ``snapshot()`` is the run's picture without I/O (``refresh=False``).
    """

    #: How long :meth:`wait` waits, after the run ended, for the agent to complete the MLflow run.
    WAIT_S = 60.0
    #: How often (s) the watcher checks, while the kernel follows the run, that its agent still lives.
    RECHECK_S = 5.0

    def __init__(self, store: Store, record: RunRecord, *, notice: Callable[[str], None],
                 subscribe: Callable[[Callable[[Batch], None]], None], snapshot: Callable[[], RunSnapshot]) -> None:
        self._store = store
        self._record = record
        self._notice = notice
        self._subscribe = subscribe
        self._snapshot = snapshot
        self._started = False  # this handle made sure the agent runs
        self._finishing: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Make sure the run's agent runs (nothing with tracking off, or when MLflow has it all): at submit,
        attach and resume; an agent that died is replaced. A problem starting it becomes a notice."""
        record = self._record
        if not (record.spec.tracking and tracking_default()):
            return
        from nbtrain.tracking.starter import AgentProblems, ensure_agent

        try:
            ensure_agent(self._store, record)
        except Exception as error:  # noqa: BLE001 - the run goes on; tracking says why it cannot
            self._notice(f"MLflow tracking of run {record.run_id}: could not start its tracking agent "
                         f"({type(error).__name__}: {error}); attach again to retry.")
        if not self._started:
            self._started = True
            problems = AgentProblems(self._store.run_dir(record.run_id))

            checked = [time.monotonic()]

            def show_problems(batch: Batch) -> None:  # on the watcher thread: a stat every 2 s at most
                message = problems.poll()
                if message:
                    self._notice(message)
                if time.monotonic() - checked[0] >= self.RECHECK_S:
                    checked[0] = time.monotonic()
                    self._replace_dead_agent()

            self._subscribe(show_problems)

    def _replace_dead_agent(self) -> None:
        """While the kernel follows the run, an agent that died is replaced (not only at submit and attach): an
        agent killed just before an attach may still hold its lock while it exits, and attach then finds it
        alive."""
        from nbtrain.tracking.starter import ensure_agent

        try:
            ensure_agent(self._store, self._record)
        except Exception:  # noqa: BLE001 - start() said why once; the next check tries again
            return

    def finish_in_background(self) -> str | None:
        """After the verdict: learn in a background thread when the agent has completed the MLflow run (its id
        then lands in the record; a problem becomes a notice). Returns, the first time only, the message that
        says so (None: no agent of this handle, or MLflow already has it all); never blocks."""
        if not self._started:
            return None
        from nbtrain.tracking.ledger import Ledger
        from nbtrain.tracking.links import LEDGER_NAME
        from nbtrain.tracking.starter import finalized

        snap = self._snapshot()
        if not snap.state.terminal:
            return None
        ledger = Ledger.load(self._store.run_dir(self._record.run_id) / LEDGER_NAME)
        if finalized(ledger, snap.attempt, snap.state.value):
            self._record.tracking_run_id = self._record.tracking_run_id or ledger.mlflow_run_id
            return None
        with self._lock:
            if self._finishing is not None:
                return None
            self._finishing = threading.Thread(target=self._await, args=(snap, self.WAIT_S),
                                               name=f"nbtrain-tracking-{self._record.run_id}", daemon=True)
            self._finishing.start()
        message = (f"run {self._record.run_id} ended; its tracking agent is completing its MLflow run "
                   "in the background (run.wait_tracking() waits for it).")
        self._notice(message)
        return message

    def wait(self, timeout: float | None = None) -> None:
        """Block until the agent has completed the MLflow run of the run's verdict (at most ``timeout`` s,
        default :attr:`WAIT_S`; less when no agent lives or it reports a problem, which becomes a notice)."""
        if not self._started:
            return
        snap = self._snapshot()
        if snap.state.terminal:
            self._await(snap, self.WAIT_S if timeout is None else timeout)

    def _await(self, snap: RunSnapshot, timeout: float) -> None:
        from nbtrain.tracking.starter import agent_error, finalized, wait_finalized

        record = self._record
        ledger = wait_finalized(self._store, record.run_id, attempt=snap.attempt, state=snap.state.value,
                                timeout=timeout)
        record.tracking_run_id = record.tracking_run_id or ledger.mlflow_run_id
        if not finalized(ledger, snap.attempt, snap.state.value):
            problem = agent_error(self._store.run_dir(record.run_id))
            if problem:
                self._notice(problem)
