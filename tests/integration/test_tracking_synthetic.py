"""Tracking paths that are slow or awkward with a real gang, on a synthetic one (real MLflow, real store).

:class:`FakeGang` writes exactly what the local backend's supervisor and workers write (event files,
rank logs, status.json) in this process, so attempts, restarts, resumes and a broken tracking store
can be driven step by step. The Run handle, its watcher and the forwarder are the real ones.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from nbtrain.bundle import capture_cell
from nbtrain.client import Run
from nbtrain.events import EventKind, EventWriter
from nbtrain.model import Failure
from nbtrain.spec import JobSpec
from nbtrain.store import RunRecord, Store, write_json_atomic
from nbtrain.tracking import TrackingForwarder


class FakeGang:
    """A 1x2 "gang" whose events, logs and verdicts the test writes."""

    def __init__(self, store: Store, **spec: Any) -> None:
        self.store = store
        bundle = capture_cell("model = make(LR, WIDTH)\n", {"LR": 0.125, "WIDTH": 64, "make": max})
        bundle.write(store.bundles)
        self.run_id = store.new_run_id("fake")
        self.record = RunRecord(run_id=self.run_id, spec=JobSpec(name="fake", procs_per_node=2, device="cpu", **spec),
                                bundle_digest=bundle.digest, backend="local", notebook={"path": "/nb/fake-study.ipynb"})
        self.record.attempts.append({"attempt": 0, "submitted": time.time()})
        store.save(self.record)
        self.attempt = -1
        self.writers: dict[str, EventWriter] = {}

    def start(self, attempt: int) -> None:
        self.attempt = attempt
        directory = self.store.attempt_dir(self.run_id, attempt)
        (directory / "logs").mkdir(parents=True)
        self.writers = {"supervisor": EventWriter(directory / "events" / "supervisor.jsonl", "supervisor", attempt=attempt)}
        for rank in (0, 1):
            self.writers[f"rank-{rank}"] = EventWriter(directory / "events" / f"rank-{rank}.jsonl", f"rank-{rank}",
                                                       attempt=attempt, rank=rank)
            (directory / "logs" / f"rank-{rank}.log").write_text(f"attempt {attempt} rank {rank} says hello\n")
        self._status("running")
        self.writers["supervisor"].emit(EventKind.STATE, state="starting", reason="")
        self.writers["supervisor"].emit(EventKind.STATE, state="running", reason="")
        for rank in (0, 1):
            self.writers[f"rank-{rank}"].emit(EventKind.ENV, python="3.11.7", torch="2.13.0", accelerate="1.9.0",
                                              device="cpu", host="fake")

    def steps(self, steps: range) -> None:
        for step in steps:
            for rank in (0, 1):
                self.writers[f"rank-{rank}"].emit(EventKind.METRIC, step=step,
                                                  values={"loss": 1.0 / (step + 1) + self.attempt, "rank": rank})

    def end(self, state: str, *, failure: Failure | None = None, retrying: bool = False) -> None:
        if failure is not None:
            self.writers["supervisor"].emit(EventKind.FAILURE, **failure.to_dict())
        self.writers["supervisor"].emit(EventKind.STATE, state=state, reason="", retrying=retrying)
        self._status(state, failure=failure, retrying=retrying, ended=time.time())

    def _status(self, state: str, *, failure: Failure | None = None, retrying: bool = False,
                ended: float | None = None) -> None:
        write_json_atomic(self.store.attempt_dir(self.run_id, self.attempt) / "status.json", {
            "state": state, "attempt": self.attempt, "started": time.time(), "ended": ended,
            "failure": failure.to_dict() if failure else None, "retrying": retrying,
            "supervisor_pid": os.getpid(), "launchers": [], "updated": time.time()})


@pytest.fixture
def store(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    for name in [k for k in os.environ if k.startswith("MLFLOW_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return Store()


def _client(tmp_path: Path) -> Any:
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")


def _files(client: Any, run_id: str, path: str | None = None) -> set[str]:
    out: set[str] = set()
    for item in client.list_artifacts(run_id, path):
        out |= _files(client, run_id, item.path) if item.is_dir else {item.path}
    return out


def _until(condition: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


BOOM = Failure(reason="exception", rank=1, node=0, exc_type="ValueError", message="boom",
               traceback="Traceback (most recent call last):\n  ...\nValueError: boom\n")


def test_restart_and_resume_stay_one_mlflow_run(store: Store, tmp_path: Path) -> None:
    gang = FakeGang(store)
    gang.start(0)
    run = Run(store.load(gang.run_id), store)
    forwarder = TrackingForwarder(run)
    run.subscribe(forwarder.on_batch)
    gang.steps(range(0, 10))
    gang.end("failed", failure=BOOM, retrying=True)  # --max-restarts: attempt 1 follows from step 5
    gang.start(1)
    gang.steps(range(5, 15))
    gang.end("succeeded")
    assert run.wait(timeout=60, progress=False).value == "succeeded"
    assert forwarder.flush(timeout=60), forwarder.error

    client = _client(tmp_path)
    mlflow_id = run.record.tracking_run_id
    info = client.get_run(mlflow_id)
    assert info.info.status == "FINISHED"
    assert client.get_experiment(info.info.experiment_id).name == "fake-study"
    assert info.data.params["LR"] == "0.125" and info.data.params["WIDTH"] == "64"
    assert info.data.tags["nbtrain.worker.torch"] == "2.13.0"
    history = sorted((m.step, m.value) for m in client.get_metric_history(mlflow_id, "loss"))
    # every point of both attempts, once each: steps 5-9 ran twice (keyed by attempt in nbtrain)
    expected = sorted([(s, 1.0 / (s + 1)) for s in range(10)] + [(s, 1.0 / (s + 1) + 1) for s in range(5, 15)])
    assert history == expected
    assert sorted((m.step, m.value) for m in client.get_metric_history(mlflow_id, "rank")) == \
        sorted([(s, 0.0) for s in range(10)] + [(s, 0.0) for s in range(5, 15)])  # rank 0's points only
    marks = sorted((m.step, m.value) for m in client.get_metric_history(mlflow_id, "nbtrain.attempt"))
    assert marks == [(0, 0.0), (5, 1.0)]
    files = _files(client, mlflow_id)
    assert {f"logs/attempt-{a}/rank-{r}.log" for a in (0, 1) for r in (0, 1)} <= files
    assert {"failures/attempt-0.json", "failures/attempt-0.txt", "bundle/main.py"} <= files
    assert "failure.json" not in files  # the run succeeded in the end

    # resume after the end: the same MLflow run is reopened, then ends with the new verdict
    run.record.attempts.append({"attempt": 2, "submitted": time.time(), "kind": "resume"})
    run.record.state, run.record.ended, run.record.failure = "pending", None, None
    store.save(run.record)
    gang.start(2)
    run.watch()
    gang.steps(range(15, 18))
    _until(lambda: client.get_run(mlflow_id).info.status == "RUNNING")
    gang.end("failed", failure=BOOM)
    assert run.wait(timeout=60, raise_on_failure=False, progress=False).value == "failed"
    assert forwarder.flush(timeout=60), forwarder.error
    assert client.get_run(mlflow_id).info.status == "FAILED"
    files = _files(client, mlflow_id)
    assert {"failure.json", "failure.txt", "failures/attempt-2.json", "logs/attempt-2/rank-1.log"} <= files
    assert [m.step for m in client.get_metric_history(mlflow_id, "nbtrain.attempt")].count(15) == 1
    ledger = json.loads((store.run_dir(run.id) / "tracking.json").read_text())
    assert ledger["finalized"] == {"attempt": 2, "state": "failed"} and ledger["uploaded"]["logs"] == [0, 1, 2]
    forwarder.close()


def test_broken_tracking_store_gives_one_notice_then_catches_up(store: Store, tmp_path: Path) -> None:
    blocker = tmp_path / "blocked"
    blocker.write_text("a file where the store's directory should be")
    missing = blocker / "mlflow.db"
    gang = FakeGang(store, experiment="recovering")
    gang.start(0)
    run = Run(store.load(gang.run_id), store)
    forwarder = TrackingForwarder(run, tracking_uri=f"sqlite:///{missing}")
    forwarder.BACKOFF_S = (0.5,)
    run.subscribe(forwarder.on_batch)  # the watcher keeps running: nothing raised into it
    gang.steps(range(0, 20))
    _until(lambda: forwarder.error is not None)
    _until(lambda: len(run.view.notices) == 1)
    notice = run.view.notices[0]
    assert "MLflow tracking" in notice and str(missing) in notice and "retrying" in notice
    assert run.status().value == "running"
    gang.steps(range(20, 30))
    blocker.unlink()  # the store becomes usable: the next retry catches up on everything
    gang.steps(range(30, 40))
    gang.end("succeeded")
    assert run.wait(timeout=60, progress=False).value == "succeeded"
    assert forwarder.flush(timeout=60), forwarder.error
    assert forwarder.error is None and len(run.view.notices) == 1
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{missing}")
    history = client.get_metric_history(run.record.tracking_run_id, "loss")
    assert sorted(m.step for m in history) == list(range(40))
    assert client.get_run(run.record.tracking_run_id).info.status == "FINISHED"
    forwarder.close()


def test_attach_to_a_finished_untracked_run_tracks_it_once(store: Store, tmp_path: Path) -> None:
    gang = FakeGang(store)
    gang.start(0)
    gang.steps(range(0, 5))
    gang.end("cancelled")
    for _ in range(2):  # the second handle finds everything done: nothing is sent twice
        run = Run(store.load(gang.run_id), store)
        run.sync()  # attach() syncs before anyone subscribes: the forwarder must still see those events
        forwarder = TrackingForwarder(run)
        run.subscribe(forwarder.on_batch)
        assert run.wait(timeout=60, progress=False).value == "cancelled"
        assert forwarder.flush(timeout=60), forwarder.error
        forwarder.close()
    client = _client(tmp_path)
    assert client.get_run(run.record.tracking_run_id).info.status == "KILLED"
    assert sorted(m.step for m in client.get_metric_history(run.record.tracking_run_id, "loss")) == list(range(5))
    assert len(client.search_runs([client.get_experiment_by_name("fake-study").experiment_id])) == 1


def test_tracking_off_does_nothing(store: Store, tmp_path: Path) -> None:
    gang = FakeGang(store, tracking=False)
    gang.start(0)
    gang.steps(range(3))
    gang.end("succeeded")
    run = Run(store.load(gang.run_id), store)
    forwarder = TrackingForwarder(run)
    run.subscribe(forwarder.on_batch)
    run.wait(timeout=60, progress=False)
    forwarder.close()
    assert run.record.tracking_run_id is None
    assert not (tmp_path / "mlflow.db").exists() and not (store.run_dir(run.id) / "tracking.json").exists()
