"""Starting a run's tracking agent: where it tracks, whether one is needed or alive, what it may print (no MLflow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nbtrain.spec import JobSpec
from nbtrain.store import RunRecord, Store
from nbtrain.tracking import starter
from nbtrain.tracking.agent import AgentLock
from nbtrain.tracking.ledger import Ledger
from nbtrain.tracking.starter import (
    AgentProblems,
    absolute_uri,
    agent_alive,
    ensure_agent,
    finalized,
    needs_agent,
    resolve_tracking_uri,
)


def test_relative_local_stores_become_absolute_and_servers_stay() -> None:
    assert absolute_uri("sqlite:///mlflow.db", "/work/nb") == "sqlite:////work/nb/mlflow.db"
    assert absolute_uri("sqlite:///../shared/m.db", "/work/nb") == "sqlite:////work/shared/m.db"
    assert absolute_uri("sqlite:////abs/m.db", "/work/nb") == "sqlite:////abs/m.db"
    assert absolute_uri("./mlruns", "/work/nb") == "file:///work/nb/mlruns"
    assert absolute_uri("file:mlruns", "/work/nb") == "file:///work/nb/mlruns"
    assert absolute_uri("file:///abs/mlruns", "/work/nb") == "file:///abs/mlruns"
    for remote in ("http://127.0.0.1:5000", "https://u:p@mlflow.example.com/", "databricks", "databricks://profile"):
        assert absolute_uri(remote, "/work/nb") == remote


def test_the_uri_is_resolved_as_mlflow_would_in_the_launching_directory(tmp_path: Path) -> None:
    cwd = str(tmp_path)
    assert resolve_tracking_uri({}, cwd) == f"sqlite:///{tmp_path}/mlflow.db"  # MLflow 3's default, absolute
    assert resolve_tracking_uri({"MLFLOW_TRACKING_URI": "sqlite:///runs.db"}, cwd) == f"sqlite:///{tmp_path}/runs.db"
    assert resolve_tracking_uri({"MLFLOW_TRACKING_URI": "http://h:5000"}, cwd) == "http://h:5000"
    (tmp_path / "mlruns" / "0").mkdir(parents=True)
    assert resolve_tracking_uri({}, cwd) == f"sqlite:///{tmp_path}/mlflow.db"  # an empty mlruns is not a store
    (tmp_path / "mlruns" / "0" / "meta.yaml").write_text("name: Default\n")
    assert resolve_tracking_uri({}, cwd) == f"file://{tmp_path}/mlruns"  # MLflow keeps an existing file store


def _record(state: str = "running", attempts: int = 1, **spec: object) -> RunRecord:
    record = RunRecord(run_id="t-000001", spec=JobSpec(name="t", **spec), bundle_digest="d", backend="local")  # type: ignore[arg-type]
    record.attempts = [{"attempt": a} for a in range(attempts)]
    record.state = state
    return record


def test_an_agent_is_needed_until_mlflow_has_the_run_as_recorded() -> None:
    done = Ledger(finalized={"attempt": 0, "state": "succeeded"})
    assert needs_agent(_record("running"), Ledger())
    assert needs_agent(_record("running"), done)  # the record's verdict is not in yet: the agent finds out
    assert needs_agent(_record("succeeded"), Ledger())
    assert not needs_agent(_record("succeeded"), done)
    assert needs_agent(_record("failed"), done)  # another verdict than the one MLflow has
    assert needs_agent(_record("succeeded", attempts=2), done)  # a resumed attempt is not in MLflow yet
    assert not needs_agent(_record("running", tracking=False), Ledger())
    assert finalized(Ledger(finalized={"attempt": 3, "state": "failed"}), 2, "failed")  # automatic restarts count
    assert not finalized(Ledger(finalized={"attempt": 1, "state": "failed"}), 2, "failed")


def test_one_agent_lock_per_run_and_alive_while_held(tmp_path: Path) -> None:
    first, second = AgentLock(tmp_path), AgentLock(tmp_path)
    assert not agent_alive(tmp_path)
    assert first.acquire()
    assert (tmp_path / "tracking-agent.lock").read_text().strip() == str(os.getpid())
    assert agent_alive(tmp_path)
    started = time.monotonic()
    assert not second.acquire(wait_s=0.3)
    assert time.monotonic() - started >= 0.3
    first.release()
    assert not agent_alive(tmp_path)
    assert second.acquire(wait_s=0)
    second.release()


def test_a_probe_does_not_keep_an_agent_from_its_lock(tmp_path: Path) -> None:
    holder = AgentLock(tmp_path)
    results: list[bool] = []
    probing = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from nbtrain.tracking.starter import _lock_held\n"
        "end = time.monotonic() + 1.0\n"
        "while time.monotonic() < end: _lock_held(Path(sys.argv[1]) / 'tracking-agent.lock')\n"
    ), str(tmp_path)])
    try:
        (tmp_path / "tracking-agent.lock").touch()
        time.sleep(0.2)
        results.append(holder.acquire())
    finally:
        probing.wait(timeout=30)
        holder.release()
    assert results == [True]


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    monkeypatch.setenv("NBTRAIN_TRACKING", "1")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    store = Store(tmp_path / "home")
    return store


def test_nothing_is_started_with_tracking_off_or_an_agent_alive(store: Store, monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    record = _record("running")
    store.save(record)
    monkeypatch.setenv("NBTRAIN_TRACKING", "0")
    assert ensure_agent(store, record) is None
    monkeypatch.setenv("NBTRAIN_TRACKING", "1")
    assert ensure_agent(store, _record("running", tracking=False)) is None
    lock = AgentLock(store.run_dir(record.run_id))
    assert lock.acquire()
    try:
        assert ensure_agent(store, record) is None
    finally:
        lock.release()
    assert not (store.run_dir(record.run_id) / "tracking-agent.json").exists()


def test_the_agent_is_started_detached_with_the_launching_process_choice(store: Store, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in for the agent's module records what it was started with (argv, environment, session)."""
    record = _record("running", experiment="study")
    store.save(record)
    seen = tmp_path / "seen.json"
    stand_in = tmp_path / "stand_in.py"
    stand_in.write_text(
        "import json, os, sys\n"
        f"json.dump({{'argv': sys.argv[1:], 'uri': os.environ.get('MLFLOW_TRACKING_URI'), 'cwd': os.getcwd(),\n"
        "           'marker': os.environ.get('NBTRAIN_TRACKING_OF'), 'sid': os.getsid(0) == os.getpid(),\n"
        f"           'supervisor': os.environ.get('NBTRAIN_SUPERVISOR_OF')}}, open({str(seen)!r} + '.tmp', 'w'))\n"
        f"os.replace({str(seen)!r} + '.tmp', {str(seen)!r})\n"
    )
    monkeypatch.setenv("NBTRAIN_SUPERVISOR_OF", "someone-else")
    real_executable = sys.executable
    monkeypatch.setattr(starter.sys, "executable", str(tmp_path / "python"))
    (tmp_path / "python").write_text(f"#!/bin/sh\nshift 2\nexec {real_executable} {stand_in} \"$@\"\n")
    (tmp_path / "python").chmod(0o755)
    pid = ensure_agent(store, record)
    assert pid is not None
    deadline = time.monotonic() + 30
    while not seen.exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    got = json.loads(seen.read_text())
    assert got["argv"] == [record.run_id, "--store", str(store.root), "--experiment", "study"]
    assert got["uri"] == f"sqlite:///{tmp_path}/mlflow.db" and got["cwd"] == str(tmp_path)
    assert got["marker"] == record.run_id and got["sid"] and got["supervisor"] is None
    config = json.loads((store.run_dir(record.run_id) / "tracking-agent.json").read_text())
    assert config == {"tracking_uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": "study", "cwd": str(tmp_path)}
    assert oct((store.run_dir(record.run_id) / "tracking-agent.json").stat().st_mode & 0o777) == "0o600"
    # a later start from elsewhere (another kernel, another MLFLOW_TRACKING_URI) keeps the launch's choice
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://elsewhere:5000")
    assert starter._config(store.run_dir(record.run_id), record)["tracking_uri"] == config["tracking_uri"]


def test_agent_problems_are_read_rarely_and_once(tmp_path: Path) -> None:
    problems = AgentProblems(tmp_path)
    problems.EVERY_S = 0.0
    assert problems.poll() is None
    (tmp_path / "tracking-agent.state.json").write_text(json.dumps({"error": "MLflow tracking: down"}))
    assert problems.poll() == "MLflow tracking: down"
    assert problems.poll() is None  # unchanged file: not read again
    problems.EVERY_S = 60.0
    (tmp_path / "tracking-agent.state.json").write_text(json.dumps({"error": "MLflow tracking: still down"}))
    os.utime(tmp_path / "tracking-agent.state.json", ns=(1, 1))
    assert problems.poll() == "MLflow tracking: still down"
    os.utime(tmp_path / "tracking-agent.state.json", ns=(2, 2))
    assert problems.poll() is None  # checked at most every EVERY_S
