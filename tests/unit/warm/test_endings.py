"""A warm gang that ended on its own (its idle TTL) is reported to the next run of its shape: the agent leaves
why in ``ended-NODE.json``, and the run that starts the new gang gets a notice saying the previous gang ended
and a new one started (a slower start than a warm run). No process is started: the agents' start is replaced."""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from nbtrain.runtime import watchdog
from nbtrain.store import Store
from nbtrain.warm import registry
from nbtrain.warm.agent import Agent

KEY = "k" * 64
GONE = "999999999:1"  # the identity of no process


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """A store under a short path: a warm gang's agent sockets live in it, and a Unix socket path has at most 107
    bytes (pytest's tmp_path under xdist, /tmp/pytest-of-USER/pytest-N/popen-gwN/TEST/, is too deep for one)."""
    monkeypatch.setattr(registry, "_start_agents", lambda gang_dir, nodes, python: None)
    home = Path(tempfile.mkdtemp(prefix="nbw-", dir="/tmp"))
    try:
        yield Store(home / "home")
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _dead_gang(store: Store, name: str, *, key: str = KEY, endings: Sequence[Mapping[str, object]] = (),
              stop: bool = False) -> Path:
    """A gang of this kernel whose agents are gone, with what they recorded of their ending."""
    gang_dir = store.root / "gangs" / name
    gang_dir.mkdir(parents=True)
    (gang_dir / "gang.json").write_text(json.dumps({"id": name, "key": key, "owner": watchdog.identity(), "nodes": 2,
                                                    "agents": [0, 1], "ttl_s": 1800.0, "starting": [GONE, GONE]}))
    for node in (0, 1):
        (gang_dir / f"node-{node}.json").write_text(json.dumps({"node": node, "identity": GONE}))
    for ending in endings:
        (gang_dir / f"ended-{ending['node']}.json").write_text(json.dumps(ending))
    if stop:
        (gang_dir / "stop").touch()
    return gang_dir


def _notices(store: Store, run_id: str = "run-1") -> list[str]:
    gang_dir = registry.acquire(store, KEY, {"nodes": 2}, run_id=run_id, ttl_s=1800.0, python=sys.executable)
    return registry.note_supervisor(gang_dir, run_id, watchdog.identity())


def test_the_agent_records_an_idle_ttl_ending(tmp_path: Path) -> None:
    (tmp_path / "gang.json").write_text(json.dumps({"ttl_s": 2.0, "agents": [0]}))
    agent = Agent(tmp_path, 0)
    agent.idle_since = time.time() - 5
    reason = agent._lapsed()
    assert reason == "idle for more than 2 s"
    agent._note_ending(reason, 5.0)
    ended = json.loads((tmp_path / "ended-0.json").read_text())
    assert ended["idle_ttl"] is True and ended["idle_s"] == 5.0 and ended["ttl_s"] == 2.0


def test_a_stopped_agent_records_nothing(tmp_path: Path) -> None:
    (tmp_path / "gang.json").write_text(json.dumps({"ttl_s": 2.0, "agents": [0]}))
    Agent(tmp_path, 0)._note_ending("asked to stop", 1.0)
    assert not list(tmp_path.glob("ended-*.json"))


def test_the_next_run_hears_that_the_previous_gang_of_its_shape_ended_on_its_ttl(store: Store) -> None:
    now = time.time()
    old = _dead_gang(store, "gang-old", endings=[
        {"node": 1, "reason": "the agent of node 0 is gone", "at": now - 10, "idle_ttl": False},
        {"node": 0, "reason": "idle for more than 1800 s", "at": now - 11, "idle_s": 1801.2, "ttl_s": 1800.0,
         "idle_ttl": True}])
    (notice,) = _notices(store)
    assert re.match(r"warm gang gang-old of this shape ended 1[12] s ago \(it was idle for 1801 s, more than its "
                    r"idle TTL \(--warm-ttl 1800 s\)\); a new warm gang \(gang-", notice), notice
    assert "starts slower than a warm run" in notice
    assert not old.exists()  # nothing of it runs: forgotten
    assert _notices(store, "run-2") == []  # said once


def test_another_ending_is_named(store: Store) -> None:
    _dead_gang(store, "gang-old", endings=[{"node": 1, "reason": "the agent of node 0 is gone", "at": time.time()}])
    (notice,) = _notices(store)
    assert "(its agent of node 1 exited: the agent of node 0 is gone)" in notice


def test_no_notice_for_a_stopped_gang_another_shape_or_an_unrecorded_ending(store: Store) -> None:
    ttl = [{"node": 0, "reason": "idle for more than 60 s", "at": time.time(), "idle_s": 61, "ttl_s": 60,
            "idle_ttl": True}]
    stopped = _dead_gang(store, "gang-stopped", endings=ttl, stop=True)
    other = _dead_gang(store, "gang-other", key="o" * 64, endings=ttl)
    _dead_gang(store, "gang-killed")
    assert _notices(store) == []
    assert stopped.exists() and other.exists()
