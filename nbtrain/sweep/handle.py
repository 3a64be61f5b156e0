"""The handle on one sweep: its trials as ordinary Runs, the best trial, waiting and a summary.

Cheap to rebuild: everything is in the sweep record, so ``nbtrain.attach_sweep(id)`` in a new kernel gives the
same handle as the one returned at start (and starts the sweep's supervisor again if it died unfinished).
"""

from __future__ import annotations

import time

from nbtrain.client.progress import ProgressLine
from nbtrain.client.run import Run
from nbtrain.store import Store
from nbtrain.sweep.record import CANCEL_NAME, SweepRecord, SweepState, TrialState, load_sweep, sweep_dir

__all__ = ["Sweep", "attach_sweep"]


class Sweep:
    """Handle on one sweep: ``trials()``, ``best()``, ``wait()``, ``cancel()``, ``summary()``; ``record`` is re-read
    on use."""

    def __init__(self, sweep_id: str, store: Store | None = None) -> None:
        self.store = store or Store()
        self._record = load_sweep(self.store, sweep_id)
        self.id = self._record.sweep_id

    @property
    def record(self) -> SweepRecord:
        """The sweep record as its supervisor saved it last."""
        self._record = load_sweep(self.store, self.id)
        return self._record

    def state(self) -> SweepState:
        """RUNNING while trials are scheduled, DONE when every trial ended, FAILED (``record.error`` says why)."""
        return self.record.state

    def trials(self) -> list[Run]:
        """The Runs of the trials submitted so far, in trial order (not watched: ``run.watch()``/``show()`` do)."""
        record = self.record
        return [Run(self.store.load(t.run_id), self.store) for t in record.trials if t.run_id is not None]

    def best(self) -> Run | None:
        """The best trial's Run once the sweep is done (by its last reported objective); None before, or when no
        trial succeeded."""
        record = self.record
        if record.best is None or record.trials[record.best].run_id is None:
            return None
        return Run(self.store.load(str(record.trials[record.best].run_id)), self.store)

    def wait(self, timeout: float | None = None, *, progress: bool = True) -> SweepState:
        """Block until the sweep is done (or ``timeout`` s pass: TimeoutError), with a status line. Ctrl-C stops
        waiting only: the sweep goes on (its supervisor is a process of its own)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        line = ProgressLine(enabled=progress)
        try:
            while True:
                record = self.record
                line.update(self._progress_text(record))
                if record.state is not SweepState.RUNNING:
                    return record.state
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"sweep {self.id} is still running after {timeout} s; wait longer.")
                time.sleep(0.5)
        finally:
            line.close()

    def cancel(self, who: str = "sweep.cancel()", timeout: float = 120.0) -> SweepState:
        """Cancel the sweep: trials not started never start, running ones are cancelled (their verdicts say the sweep
        was cancelled, and by ``who``); the best of the trials that succeeded is still named. Returns once the
        supervisor has done it (TimeoutError after ``timeout`` s); a sweep that ended is left as it is."""
        import os

        from nbtrain.private import PRIVATE_FILE
        from nbtrain.sweep.supervisor import ensure_supervisor

        if self.record.state is not SweepState.RUNNING:
            return self._record.state
        fd = os.open(sweep_dir(self.store, self.id) / CANCEL_NAME, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(who)
        ensure_supervisor(self.store, self.id)  # a dead supervisor's successor carries the cancel out
        return self.wait(timeout, progress=False)

    @staticmethod
    def _progress_text(record: SweepRecord) -> str:
        counts: dict[str, int] = {}
        for trial in record.trials:
            counts[trial.state.value] = counts.get(trial.state.value, 0) + 1
        return f"{record.sweep_id}: {record.state.value} (" + ", ".join(f"{n} {s}" for s, n in counts.items()) + ")"

    def summary(self) -> str:
        """Readable summary: each trial's params, run, state and objective, why a stopped trial was stopped, and
        the best trial."""
        record = self.record
        spec = record.spec
        lines = [f"sweep {record.sweep_id}: {record.state.value} ({spec.kind.value}, {len(record.trials)} trials, "
                 f"at most {spec.concurrency} at a time" + (f", objective {spec.objective} {spec.mode.value}"
                                                            if spec.objective else "") + ")"]
        if record.error:
            lines.append(f"  FAILED: {record.error}")
        for trial in record.trials:
            params = ", ".join(f"{k}={v}" for k, v in trial.params.items())
            value = f" {spec.objective}={trial.objective:.6g}" if spec.objective and trial.objective is not None else ""
            mark = " (best)" if record.best == trial.index else ""
            lines.append(f"  trial {trial.index}{mark}: {params} -> {trial.run_id or '-'} {trial.state.value}{value}")
            if trial.state is TrialState.STOPPED and trial.stopped:
                lines.append(f"      stopped early: {trial.stopped}")
        if record.best is not None:
            best = record.trials[record.best]
            lines.append(f"  best trial: {best.index} ({best.run_id}), " + ", ".join(
                f"{k}={v}" for k, v in best.params.items()))
        return "\n".join(lines)

    def __repr__(self) -> str:
        record = self._record
        return f"<Sweep {self.id} {record.spec.kind.value} {len(record.trials)} trials: {record.state.value}>"


def attach_sweep(sweep_id: str, *, store: Store | None = None) -> Sweep:
    """The handle of sweep ``sweep_id`` (a unique prefix is enough), e.g. after a kernel restart. An unfinished
    sweep whose supervisor is gone (killed, a reboot) gets a new one, which picks the trials up where they are."""
    from nbtrain.sweep.supervisor import ensure_supervisor

    sweep = Sweep(sweep_id, store)
    ensure_supervisor(sweep.store, sweep.id)
    return sweep
