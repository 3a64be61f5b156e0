"""The run's tracking agent: forward one run to MLflow, beside the run, without a kernel.

Started detached (own session) by :func:`nbtrain.tracking.starter.ensure_agent` when a run is launched or
attached, as ``python -m nbtrain.client.agent RUN_ID``: the client opens the run (tracking never builds one) and
hands it to :func:`main` here. It follows the run the way ``attach`` does (a :class:`~nbtrain.reader.FollowedRun`
on the store and the backend; for Kubernetes that makes it the run's mirror unless another process mirrors
already) and hands
every batch to the one :class:`~nbtrain.tracking.forwarder.TrackingForwarder`, whose ledger and forwarding
lock keep MLflow exactly once whoever forwards. It exits once the run is terminal and MLflow has all of it
(status, artifacts), or after ``--settle-s`` seconds of failing to get there (a later attach starts a new
agent, which picks up from the ledger).

One agent per run: it holds ``runs/<id>/tracking-agent.lock`` for its whole life. When a resume launched a
new attempt while it was finishing the previous one, it goes on with the new attempt instead of exiting
(the resume's own start found the lock taken).

Output goes to ``runs/<id>/tracking-agent.log`` (stdout and stderr), with the tracking URI's credentials
masked; the latest MLflow problem also goes to ``tracking-agent.state.json``, which kernels show as a notice.
SIGTERM or SIGINT ends the agent (never the run); whatever was not sent yet is sent by the next one.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from nbtrain.filelock import FileLock
from nbtrain.model import is_terminal
from nbtrain.reader import FollowedRun
from nbtrain.secrets import redact_url
from nbtrain.store import RunRecord, Store, write_json_atomic
from nbtrain.tracking.ledger import Ledger
from nbtrain.tracking.links import LEDGER_NAME
from nbtrain.tracking.starter import AGENT_LOCK, AGENT_STATE, finalized

if TYPE_CHECKING:
    from nbtrain.tracking.plugins import PluginForwarder

__all__ = ["OpenRun", "main"]

#: How the client opens a run for the agent (``nbtrain.client.agent``): the run's record and store -> a FollowedRun.
OpenRun = Callable[[RunRecord, Store], FollowedRun]

POLL_S = 0.5  # status + new events; the forwarder batches to MLflow every second anyway
SETTLE_S = 600.0  # after the run ends: how long to keep trying to complete the MLflow run
LOCK_WAIT_S = 2.0  # a kernel probing the lock holds it for an instant; another agent holds it for good
START_WAIT_S = 300.0  # at most this long for a gang's training to get under way before MLflow is started


class AgentLock:
    """``tracking-agent.lock``: held for the agent's life (:class:`nbtrain.filelock.FileLock`), its pid written inside."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / AGENT_LOCK
        self._lock = FileLock(self.path)

    def acquire(self, wait_s: float = LOCK_WAIT_S) -> bool:
        """Take the lock, retrying for ``wait_s`` (a kernel's probe holds it for an instant); False when another
        agent holds it."""
        if not self._lock.acquire(blocking=False, wait_s=wait_s):
            return False
        self._lock.write(f"{os.getpid()}\n")
        return True

    def release(self) -> None:
        """Let go (idempotent)."""
        self._lock.release()


class _Log:
    """Timestamped lines on stdout (the agent's log file), credentials of every URL in them removed
    (:func:`nbtrain.secrets.redact_url`: not only the tracking URI's, and in whatever form a message spells it)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def __call__(self, message: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        print(f"{stamp} tracking agent {os.getpid()} of {self.run_id}: {redact_url(message)}", flush=True)


def write_state(path: Path, error: str | None) -> None:
    """The agent's state file: its last error (credentials of every URL removed), its pid, when it was written."""
    write_json_atomic(path, {"error": redact_url(error) if error else None, "pid": os.getpid(), "updated": time.time()})


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # not KeyboardInterrupt: nothing here may cancel the run


def follow(store: Store, run_id: str, *, open_run: OpenRun, tracking_uri: str | None, experiment: str | None,
           lock: AgentLock, log: _Log, settle_s: float = SETTLE_S) -> int:
    """Forward ``run_id`` until it ends and MLflow has all of it; 0 when complete, 1 when given up. Every run opened
    is released at the end (a Kubernetes run is mirrored by whichever process follows it: here, often)."""
    from nbtrain.tracking.forwarder import TrackingForwarder

    ledger_path = store.run_dir(run_id) / LEDGER_NAME
    state_path = store.run_dir(run_id) / AGENT_STATE
    reported: list[str | None] = [None]

    def report(forwarder: TrackingForwarder) -> None:
        error = forwarder.error
        if error != reported[0]:
            reported[0] = error
            if error:
                log(error)
            write_state(state_path, error)

    opened: list[FollowedRun] = []
    try:
        while True:
            record = store.load(run_id)
            if not record.spec.tracking:
                log("the run is not tracked (--no-tracking): nothing to do")
                return 0
            run = open_run(record, store)
            opened.append(run)
            forwarder = TrackingForwarder(run, tracking_uri=tracking_uri, experiment=experiment)
            run.subscribe(forwarder.on_batch, lines=False, watch=False)  # fed by the loop below, on this thread
            for plugin in start_plugins(run, experiment, log):  # the tracker plug-ins get the same record
                run.subscribe(plugin.on_batch, lines=False, watch=False)
            log(f"following attempt {run.snapshot(refresh=False).attempt}")
            try:
                while True:
                    state = run.status()
                    run.sync()  # the forwarder's on_batch: new events, and the final flush once terminal
                    report(forwarder)
                    if state.terminal:
                        break
                    time.sleep(POLL_S)
                snap = run.snapshot(refresh=False)
                deadline = time.monotonic() + settle_s
                while not finalized(Ledger.load(ledger_path), snap.attempt, snap.state.value):
                    if time.monotonic() >= deadline:
                        log(f"gave up after {settle_s:.0f} s: the MLflow run is not complete; attaching to the run "
                            "starts a new agent, which goes on from what was sent")
                        return 1
                    forwarder.flush(timeout=min(30.0, max(1.0, deadline - time.monotonic())))
                    report(forwarder)
                    time.sleep(1.0)
            finally:
                forwarder.close()
            log(f"attempt {snap.attempt} {snap.state.value}: the MLflow run is complete")
            # A resume may have launched a new attempt meanwhile and found our lock taken: go on with it.
            lock.release()
            if not store.load(run_id).latest_attempt > snap.attempt or not lock.acquire():
                return 0
            time.sleep(POLL_S)  # the resume may still be submitting (its handle lands in the record after)
    finally:
        for followed in opened:
            followed.release(10.0)


def start_plugins(run: FollowedRun, experiment: str | None, log: _Log) -> list[PluginForwarder]:
    """A forwarder for every enabled tracker plug-in (:mod:`nbtrain.tracking.plugins`); problems are logged."""
    from nbtrain.tracking.plugins import PluginForwarder, enabled_plugins

    try:
        classes = enabled_plugins()
    except Exception as error:  # noqa: BLE001 - a bad NBTRAIN_TRACKERS or plug-in must not stop MLflow
        log(f"tracker plug-ins not started: {error}")
        run.notice(f"tracker plug-ins not started: {error}")
        return []
    if classes:
        log(f"tracker plug-ins: {', '.join(classes)}")
    return [PluginForwarder(run, name, cls(), experiment=experiment or "") for name, cls in classes.items()]


#: What rank 0 writes once its training is under way (or over): the gang's start-up is behind it.
_UNDER_WAY = (b'"kind":"metric"', b'"kind":"params"', b'"kind":"checkpoint"', b'"kind":"rank_done"',
              b'"kind":"rank_error"')


def await_first_step(store: Store, run_id: str, *, timeout: float = START_WAIT_S) -> None:
    """Return once rank 0 of the latest attempt reported training under way, or the attempt ended (bounded).

    Only for backends whose ranks write their events into the store (local, Slurm): importing MLflow and
    creating the MLflow run takes seconds of CPU, which a starting gang needs more (every rank imports torch);
    nothing is lost by starting later: the forwarder reads the attempt's events from the beginning.
    """
    import json

    attempts = store.run_dir(run_id) / "attempts"
    deadline = time.monotonic() + timeout
    offset = 0
    while time.monotonic() < deadline:
        numbers = sorted(int(p.name) for p in attempts.iterdir() if p.name.isdigit()) if attempts.is_dir() else []
        if numbers:
            attempt = attempts / str(numbers[-1])
            try:
                with open(attempt / "events" / "rank-0.jsonl", "rb") as handle:
                    handle.seek(offset)
                    chunk = handle.read()
                if any(marker in chunk for marker in _UNDER_WAY):
                    return
                offset += chunk.rfind(b"\n") + 1  # a line cut in the middle is read again next time
            except OSError:
                pass
            try:
                if is_terminal(json.loads((attempt / "status.json").read_text()).get("state", "")):
                    return
            except (OSError, ValueError):
                pass
        time.sleep(POLL_S)


def main(argv: list[str] | None = None, *, open_run: OpenRun) -> int:
    """The agent's process (see the module docstring) with ``open_run`` opening the run; the exit code says whether
    the MLflow run is complete."""
    parser = argparse.ArgumentParser(prog="python -m nbtrain.client.agent",
                                     description="Forward one nbtrain run to MLflow until it ends.")
    parser.add_argument("run_id")
    parser.add_argument("--store", help="the store's root (default: NBTRAIN_HOME or ~/.nbtrain)")
    parser.add_argument("--experiment", help="MLflow experiment for a new MLflow run (default: as the kernel's)")
    parser.add_argument("--settle-s", type=float, default=SETTLE_S,
                        help="after the run ends, how long to keep trying to complete the MLflow run")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    os.umask(0o077)
    store = Store(args.store) if args.store else Store()
    uri = os.environ.get("MLFLOW_TRACKING_URI") or None  # set by the starter: the launching process's choice
    log = _Log(args.run_id)
    run_dir = store.run_dir(args.run_id)
    if not (run_dir / "record.json").is_file():
        log(f"no run {args.run_id} in {store.root}")
        return 2
    lock = AgentLock(run_dir)
    if not lock.acquire():
        log("another tracking agent follows this run; exiting")
        return 0
    log(f"started (MLflow {uri or 'default'}, experiment {args.experiment!r})")
    try:
        if store.load(args.run_id).backend in ("local", "slurm"):  # a Kubernetes run's agent may be its mirror
            await_first_step(store, args.run_id)
        code = follow(store, args.run_id, open_run=open_run, tracking_uri=uri, experiment=args.experiment, lock=lock, log=log,
                      settle_s=args.settle_s)
    except SystemExit as stop:
        log(f"stopped by a signal ({stop.code}); the next agent goes on from what was sent")
        code = 1
    except Exception as error:  # noqa: BLE001 - logged, then a non-zero exit: attach starts a new agent
        import traceback

        log(f"failed: {type(error).__name__}: {error}\n{traceback.format_exc()}")
        code = 1
    finally:
        lock.release()
    log(f"exiting ({code})")
    return code
