"""The sweep supervisor: a detached process (``python -m nbtrain.sweep.supervisor SWEEP --store ROOT``) that
runs a sweep's trials to the end, whether or not the kernel that started it lives.

Each round (every ``poll_s``), in order:

1. asks every submitted trial's run for its state (``Run.status``, which records its verdict) and reads its
   objective through ``Run.metrics`` (the public Run API);
2. stops the running trials the early-stop rule names (:func:`nbtrain.sweep.policy.median_stops`, or
   :func:`~nbtrain.sweep.policy.asha_stops` with ``--early-stop asha``):
   ``Run.cancel(reason=...)``, so the trial's own record and summary say the sweep stopped it and why;
3. submits waiting trials, in order, while fewer than ``concurrency`` run (``nbtrain.client.api.submit_stored``:
   the one submission path; each trial is an ordinary run);
4. tags each trial's MLflow run as a child of the sweep's parent run (:mod:`nbtrain.sweep.parent`);
5. saves the sweep record.

When every trial has ended (or the sweep was cancelled: ``cancel`` in its directory; waiting trials never start,
running ones are cancelled with that reason) it names the best trial (:func:`nbtrain.sweep.policy.best_trial`) in the record and on
the MLflow parent. It holds ``supervisor.lock`` while it lives: a second supervisor of the same sweep exits at once
(``nbtrain.attach_sweep`` starts one again when a sweep is unfinished and none lives, e.g. after a reboot).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import traceback

from nbtrain.client.api import submit_stored
from nbtrain.client.run import Run
from nbtrain.filelock import is_locked, try_locked
from nbtrain.model import RunState
from nbtrain.spec import tracking_default
from nbtrain.store import Store
from nbtrain.sweep.parent import finish_parent, link_child, trial_mlflow
from nbtrain.sweep.policy import TrialProgress, asha_stops, best_trial, median_stops
from nbtrain.sweep.record import (
    CANCEL_NAME,
    LOCK_NAME,
    LOG_NAME,
    SweepRecord,
    SweepState,
    TrialEntry,
    TrialState,
    load_sweep,
    save_sweep,
    sweep_dir,
)
from nbtrain.sweep.space import EarlyStop

__all__ = ["SweepSupervisor", "ensure_supervisor", "main", "supervisor_alive"]

#: how long the end of a sweep waits for the trials' tracking agents to have created their MLflow runs
LINK_WAIT_S = 60.0


class SweepSupervisor:
    """Runs one sweep's rounds (module docstring) until every trial has ended."""

    def __init__(self, store: Store, record: SweepRecord, *, poll_s: float = 0.5) -> None:
        self.store, self.record, self.poll_s = store, record, poll_s
        self._runs: dict[int, Run] = {}
        self._points: dict[int, tuple[tuple[int, float], ...]] = {}
        self._unlinked: set[int] = set()  # trials whose MLflow link failed (logged once)

    def run(self) -> None:
        """Every round until the sweep is done; then the best trial and the MLflow parent's end."""
        self._adopt_orphans()
        while True:
            progress = self._refresh()
            if self._cancel_requested():
                self._cancel_all()
                break
            self._stop_laggards(progress)
            self._submit_waiting()
            self._link_tracking()
            save_sweep(self.store, self.record)
            if all(t.state.ended for t in self.record.trials):
                break
            time.sleep(self.poll_s)
        self._finish(self._refresh())

    def _cancel_requested(self) -> str | None:
        path = sweep_dir(self.store, self.record.sweep_id) / CANCEL_NAME
        try:
            return path.read_text(encoding="utf-8").strip() or "cancelled"
        except OSError:
            return None

    def _cancel_all(self) -> None:
        """The sweep was cancelled: waiting trials never start, running ones are cancelled with that reason."""
        who = self._cancel_requested() or "cancelled"
        for trial in self.record.trials:
            if trial.state is TrialState.WAITING:
                trial.state, trial.ended = TrialState.CANCELLED, time.time()
            elif trial.state is TrialState.RUNNING:
                self._run_of(trial).cancel(reason=f"sweep {self.record.sweep_id} was cancelled ({who})")
        self.record.state = SweepState.CANCELLED

    def _adopt_orphans(self) -> None:
        """A previous supervisor killed between submitting a trial and saving its run id left a run the record does
        not name: find it by the sweep and trial its record names (``notebook``), instead of submitting it again."""
        waiting = {t.index: t for t in self.record.trials if t.state is TrialState.WAITING}
        if not waiting:
            return
        for run_record in self.store.records():
            origin = run_record.notebook or {}
            if origin.get("sweep") == self.record.sweep_id and str(origin.get("sweep_trial")).isdigit():
                trial = waiting.get(int(origin["sweep_trial"]))
                if trial is not None:
                    trial.run_id, trial.state, trial.submitted = run_record.run_id, TrialState.RUNNING, run_record.created

    def _run_of(self, trial: TrialEntry) -> Run:
        run = self._runs.get(trial.index)
        if run is None:
            assert trial.run_id is not None  # only submitted trials have a run
            run = self._runs[trial.index] = Run(self.store.load(trial.run_id), self.store)
        return run

    def _refresh(self) -> list[TrialProgress]:
        """Each trial's state and objective now (steps 1 of the round)."""
        progress = []
        objective = self.record.spec.objective
        for trial in self.record.trials:
            if trial.run_id is not None and (not trial.state.ended or trial.index not in self._points):
                run = self._run_of(trial)
                state = run.status()
                if state.terminal and not trial.state.ended:
                    self._ended(trial, run)
                if objective:
                    self._points[trial.index] = tuple(run.metrics(0).get(objective, ()))
                elif trial.state.ended:
                    self._points[trial.index] = ()
            points = self._points.get(trial.index, ())
            trial.objective = points[-1][1] if points else None
            progress.append(TrialProgress(trial.index, running=trial.state is TrialState.RUNNING,
                                          completed=trial.state is TrialState.SUCCEEDED, points=points))
        return progress

    def _stop_laggards(self, progress: list[TrialProgress]) -> None:
        spec = self.record.spec
        if spec.early_stop is EarlyStop.NONE or not spec.objective:
            return
        rule = asha_stops if spec.early_stop is EarlyStop.ASHA else median_stops
        for decision in rule(progress, objective=spec.objective, mode=spec.mode, grace_steps=spec.grace_steps):
            trial = self.record.trials[decision.index]
            trial.stopped = decision.reason
            save_sweep(self.store, self.record)  # the reason is on record before the run ends
            run = self._run_of(trial)
            run.cancel(reason=f"stopped early by sweep {self.record.sweep_id}: {decision.reason}")
            if run.status().terminal:
                self._ended(trial, run)

    @staticmethod
    def _ended(trial: TrialEntry, run: Run) -> None:
        """Record the verdict of ``trial``'s run: STOPPED when the sweep's stop cancelled it; its own state otherwise
        (a trial that ended by itself just before its stop keeps its verdict, and no stop reason)."""
        state = run.status()
        if trial.stopped and state is RunState.CANCELLED:
            trial.state = TrialState.STOPPED
        else:
            trial.state, trial.stopped = TrialState(state.value), None
        trial.ended = run.record.ended or time.time()

    def _submit_waiting(self) -> None:
        running = sum(1 for t in self.record.trials if t.state is TrialState.RUNNING)
        for trial in self.record.trials:
            if running >= self.record.spec.concurrency:
                return
            if trial.state is not TrialState.WAITING:
                continue
            try:
                run = submit_stored(self.record.bundle_digest, trial.spec, store=self.store, kind="sweep",
                                    notebook={**self.record.notebook, "sweep": self.record.sweep_id,
                                              "sweep_trial": str(trial.index)},
                                    profile=self.record.profile)
            except Exception as error:  # noqa: BLE001 - one refused trial is that trial's verdict, not the sweep's
                trial.state, trial.ended = TrialState.FAILED, time.time()
                trial.stopped = None
                self._points[trial.index] = ()
                print(f"sweep {self.record.sweep_id}: trial {trial.index} was not submitted: {error}", flush=True)
                continue
            self._runs[trial.index] = run
            trial.run_id, trial.state, trial.submitted = run.id, TrialState.RUNNING, run.record.created
            running += 1
            save_sweep(self.store, self.record)  # the run id is on record at once: attach lists the trial

    def _link_tracking(self) -> None:
        """Tag the trials' MLflow runs as the parent's children; an MLflow problem is logged and that trial left
        unlinked (tracking never stops a sweep)."""
        for trial in self.record.trials:
            if trial.run_id is None or trial.mlflow_run_id is not None or trial.index in self._unlinked:
                continue
            where = trial_mlflow(self.store, trial.run_id)
            if where is None:
                continue
            try:
                link_child(self.record, trial, where)
            except Exception as error:  # noqa: BLE001 - see the docstring
                self._unlinked.add(trial.index)
                print(f"sweep {self.record.sweep_id}: trial {trial.index} ({trial.run_id}) not linked to the MLflow "
                      f"parent run: {type(error).__name__}: {error}", flush=True)

    def _tracked(self, trial: TrialEntry) -> bool:
        """Whether the trial's run has an MLflow tracking agent (as ``ensure_agent`` decides)."""
        return trial.spec.tracking and tracking_default()

    def _finish(self, progress: list[TrialProgress]) -> None:
        if self.record.spec.objective:  # by the objective; none when no trial that succeeded reported it
            best = best_trial(progress, self.record.spec.mode)
        else:  # no objective: the first trial that succeeded
            best = next(((t.index, 0.0) for t in self.record.trials if t.state is TrialState.SUCCEEDED), None)
        self.record.best = best[0] if best is not None else None
        deadline = time.monotonic() + LINK_WAIT_S
        while time.monotonic() < deadline and any(
                t.run_id and t.mlflow_run_id is None and t.index not in self._unlinked and self._tracked(t) for t in self.record.trials):
            time.sleep(self.poll_s)
            self._link_tracking()
        if self.record.state is SweepState.RUNNING:
            self.record.state = SweepState.DONE
        self.record.ended = time.time()
        finish_parent(self.record)
        save_sweep(self.store, self.record)


def supervisor_alive(store: Store, sweep_id: str) -> bool:
    """True while a supervisor of ``sweep_id`` holds its lock."""
    return is_locked(sweep_dir(store, sweep_id) / LOCK_NAME)


def ensure_supervisor(store: Store, sweep_id: str) -> int | None:
    """Start the supervisor of an unfinished sweep unless one lives; the new process's pid, or None.

    It runs in its own session (it outlives this process, and a Ctrl-C here never reaches it).
    """
    record = load_sweep(store, sweep_id)
    if record.state is not SweepState.RUNNING or supervisor_alive(store, record.sweep_id):
        return None
    directory = sweep_dir(store, record.sweep_id)
    env = {k: v for k, v in os.environ.items() if k not in ("NBTRAIN_RUN_ID", "NBTRAIN_SUPERVISOR_OF")}
    argv = [sys.executable, "-m", "nbtrain.sweep.supervisor", record.sweep_id, "--store", str(store.root)]
    log = os.open(directory / LOG_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True, env=env)
    finally:
        os.close(log)
    return child.pid


def main(argv: list[str] | None = None) -> int:
    """Supervise one sweep to its end; exit 0 (also when another supervisor has it), 1 when it failed."""
    parser = argparse.ArgumentParser(prog="python -m nbtrain.sweep.supervisor")
    parser.add_argument("sweep")
    parser.add_argument("--store", required=True)
    parser.add_argument("--poll", type=float, default=0.5)
    args = parser.parse_args(argv)
    store = Store(args.store)
    with try_locked(sweep_dir(store, args.sweep) / LOCK_NAME) as mine:
        if not mine:
            return 0
        record = load_sweep(store, args.sweep)
        if record.state is not SweepState.RUNNING:
            return 0
        try:
            SweepSupervisor(store, record, poll_s=args.poll).run()
        except Exception as error:  # noqa: BLE001 - the record says why the sweep stopped; the log has the trace
            traceback.print_exc()
            record.state, record.error, record.ended = SweepState.FAILED, f"{type(error).__name__}: {error}", time.time()
            save_sweep(store, record)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
