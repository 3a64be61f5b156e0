"""Why a warm generation was recycled, in the words the monitor and ``%nbtrain gangs`` show; the monitor's
header carries the warm facts the supervisor's notices give (gang, generation, recycle reason)."""

from __future__ import annotations

from nbtrain.events import Event, EventKind
from nbtrain.model import Failure, RunSnapshot, RunState, WarmFacts
from nbtrain.view import RunView
from nbtrain.warm.recycle import REASON_MAX, recycle_reason
from nbtrain.widgets.viewmodel import MonitorLimits, MonitorModel


def test_a_clean_generation_is_not_recycled_unless_its_ranks_left_processes_running() -> None:
    assert recycle_reason(RunState.SUCCEEDED, None) is None
    assert recycle_reason(RunState.SUCCEEDED, None, leaked=1) == "leaked 1 process (DataLoader workers?)"
    assert recycle_reason(RunState.SUCCEEDED, None, leaked=3) == "leaked 3 processes (DataLoader workers?)"


def test_a_failed_generation_is_recycled_naming_the_first_failure() -> None:
    raised = Failure(reason="", rank=1, node=1, exc_type="ValueError", message="boom")
    assert recycle_reason(RunState.FAILED, raised) == "rank 1 raised ValueError"
    killed = Failure(reason="", rank=0, exit_code=-9, signal="SIGKILL")
    assert recycle_reason(RunState.FAILED, killed) == "rank 0 died (SIGKILL)"
    assert recycle_reason(RunState.FAILED, Failure(reason="", rank=2, exit_code=3)) == "rank 2 exited with code 3"
    hung = Failure(reason="hung: rank 1 waits in all_reduce (--hang-timeout 30 s)", rank=1)
    assert recycle_reason(RunState.FAILED, hung) == hung.reason
    timeout = Failure(reason="the run exceeded its timeout of 5 s (--timeout)")
    assert recycle_reason(RunState.FAILED, timeout) == timeout.reason
    assert recycle_reason(RunState.FAILED, None) == "the run ended failed"
    long = recycle_reason(RunState.FAILED, Failure(reason="x " * 500))
    assert long is not None and len(long) == REASON_MAX and long.endswith("…")


def test_a_cancelled_generation_is_recycled() -> None:
    assert recycle_reason(RunState.CANCELLED, None) == "cancelled"
    assert recycle_reason(RunState.CANCELLED, None, cancel="Stop: no step boundary within 5 s") == \
        "Stop: no step boundary within 5 s"


def _notice(seq: int, source: str = "supervisor", attempt: int = 0, **data: object) -> Event:
    return Event(EventKind.NOTICE, source, seq, 1000.0 + seq, attempt, None if source == "supervisor" else 0,
                 {"message": f"notice {seq}", **data})


def test_the_header_shows_the_gang_generation_and_recycle_reason_of_the_current_attempt() -> None:
    view = RunView()
    view.apply(_notice(1, warm={"gang": "gang-ab", "generation": 3}))
    view.apply(_notice(1, source="rank-0", warm={"gang": "forged", "generation": 99}))  # only the supervisor says
    assert view.warm == {"gang": "gang-ab", "generation": 3}
    view.apply(_notice(2, warm={"gang": "gang-ab", "generation": 3, "recycled": "rank 1 raised ValueError"}))
    model = MonitorModel("r-1", "r", "local", 2, 1, {}, MonitorLimits())
    snapshot = RunSnapshot(run_id="r-1", name="r", backend="local", state=RunState.FAILED, attempt=0, nodes=2, procs=1,
                           world_size=2, created=900.0,
                           warm=WarmFacts(gang=view.warm["gang"], generation=view.warm["generation"],
                                          recycled=view.warm["recycled"]))
    assert model.header(snapshot, {})["warm"] == {"gang": "gang-ab", "generation": 3,
                                                  "recycled": "rank 1 raised ValueError"}
    cold = RunSnapshot(run_id="r-2", name="r", backend="local", state=RunState.RUNNING, attempt=0, nodes=2, procs=1,
                       world_size=2, created=900.0)
    assert model.header(cold, {})["warm"] is None
    view.apply(_notice(1, attempt=1, warm={"gang": "gang-ab", "generation": 4}))  # a restart: a new generation
    assert view.warm == {"gang": "gang-ab", "generation": 4}
