"""The gang engine with a driver of its own: a new engine plugs in through the driver protocol alone.

The driver's gang is two real processes that report as ranks do (RANK_START, then RANK_DONE or RANK_ERROR in
their event files); the engine decides the verdict, names the failing rank, asks the driver for its last word and
writes status.json with the driver's fields.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nbtrain.gang.driver import DriverDefaults
from nbtrain.gang.engine import Engine
from nbtrain.gang.files import write_attempt_files
from nbtrain.gang.request import AccelerateConfig, GangRequest, Launcher
from nbtrain.model import Failure, RunState
from nbtrain.store import read_json

RANK = """
import os, sys
from pathlib import Path
from nbtrain.events import EventKind, EventWriter
rank, fail = int(sys.argv[1]), sys.argv[2] == "1"
out = EventWriter(Path(sys.argv[3]) / f"rank-{rank}.jsonl", f"rank-{rank}", rank=rank)
out.emit(EventKind.RANK_START, pid=os.getpid())
if fail:
    out.emit(EventKind.RANK_ERROR, exc_type="ValueError", message="bad batch", traceback="Traceback ...")
    sys.exit(1)
out.emit(EventKind.RANK_DONE, ok=True)
"""


class TwoProcesses(DriverDefaults):
    """A gang of one node: two python processes (rank 1 fails when asked to)."""

    fail = False

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.asked: list[str] = []

    def start(self, tmp: Path) -> None:
        for rank in (0, 1):
            flag = "1" if self.fail and rank == 1 else "0"
            self.procs.append(subprocess.Popen([sys.executable, "-c", RANK, str(rank), flag,
                                                str(self.engine.events_dir)], env=dict(os.environ)))

    def nodes(self) -> list[tuple[int, int | None]]:
        codes = [p.poll() for p in self.procs]
        code = None if any(c is None for c in codes) else next((c for c in codes if c), 0)
        return [(self.procs[0].pid, code)] if self.procs else []

    def end(self) -> int:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
        return 0

    def before_verdict(self, state: RunState, reason: str, failure: Failure | None) -> tuple[str, Failure | None]:
        self.asked.append(state.value)
        return reason, failure

    def status_fields(self) -> dict[str, Any]:
        return {"driver": "two-processes"}


def _attempt(tmp_path: Path, *, restart_budget: int = 0) -> Path:
    root = tmp_path / "attempts" / "0"
    request = GangRequest(
        run_id="r-1", attempt=0, world_size=2, use_gpu=False, launchers=(Launcher(node=0, ranks=(0, 1)),),
        attempt_dir=str(root), store_root=str(tmp_path), bundle_dir=str(tmp_path / "bundle"), bundle_digest="0" * 64,
        accelerate_config=AccelerateConfig(str(root / "accelerate.yaml"), "num_processes: 2\n"),
        restart_budget=restart_budget, timeout_s=120)
    assert write_attempt_files(request) == root
    return root


@pytest.fixture(autouse=True)
def _signals() -> Any:
    """The engine installs its SIGTERM/SIGINT handlers (its process is the supervisor's): restored after."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("fail", [False, True])
def test_the_engine_supervises_a_driver_it_was_given(tmp_path: Path, fail: bool) -> None:
    root = _attempt(tmp_path, restart_budget=1)

    def make(engine: Engine) -> TwoProcesses:
        driver = TwoProcesses(engine)
        driver.fail = fail
        return driver

    engine = Engine(root, make)
    state = engine.run()
    status = read_json(root / "status.json")
    assert status["driver"] == "two-processes" and status["launchers"][0]["exit_code"] == (1 if fail else 0)
    assert engine.driver.asked == [state.value]  # type: ignore[attr-defined]
    if fail:
        assert state is RunState.FAILED and status["failure"]["rank"] == 1
        assert "bad batch" in status["failure"]["reason"] or status["failure"]["exc_type"] == "ValueError"
        assert status["retrying"] and engine.restarts_here()  # budget left, the default placement: here
    else:
        assert state is RunState.SUCCEEDED and not status["retrying"] and status["failure"] is None
    assert not (root / "tmp").exists()
