"""An attempt's status.json read the same way by every supervised backend (nbtrain/backends/statusfile.py)."""

from __future__ import annotations

from pathlib import Path

from nbtrain.backends.statusfile import read_status, status_from
from nbtrain.model import RunState
from nbtrain.store import write_json_atomic


def test_a_running_attempt_with_stalled_ranks_is_stalled_with_the_ranks_and_the_detail() -> None:
    status = status_from({"state": "running", "started": 5.0, "stalled": [1, 0, 1],
                          "detail": "stalled: rank 1 stuck outside any collective"}, 2)
    assert status is not None
    assert status.state is RunState.STALLED and not status.state.terminal
    assert status.stalled == (0, 1) and status.attempt == 2 and status.started == 5.0
    assert status.detail.startswith("stalled: rank 1")


def test_progress_resumed_or_a_verdict_is_not_a_stall() -> None:
    resumed = status_from({"state": "running", "stalled": []}, 0)
    assert resumed is not None and resumed.state is RunState.RUNNING and resumed.stalled == ()
    failed = status_from({"state": "failed", "stalled": [1], "ended": 9.0,
                          "failure": {"reason": "hung: rank 1", "rank": 1}}, 0)
    assert failed is not None and failed.state is RunState.FAILED and failed.stalled == ()
    assert failed.failure is not None and failed.failure.rank == 1


def test_a_retrying_attempt_reads_as_starting_with_the_failure_it_restarts_after() -> None:
    status = status_from({"state": "failed", "retrying": True, "stalled": [0],
                          "failure": {"reason": "exit code 1", "rank": 0, "exit_code": 1}}, 1)
    assert status is not None and status.state is RunState.STARTING and status.ended is None
    assert status.detail.startswith("restarting after: rank 0")


def test_rank_entries_that_are_not_numbers_are_ignored() -> None:
    status = status_from({"state": "running", "stalled": ["1", None, 2.5]}, 0)
    assert status is not None and status.state is RunState.RUNNING


def test_read_status_is_none_for_missing_torn_or_foreign_files(tmp_path: Path) -> None:
    assert read_status(tmp_path / "status.json") is None
    (tmp_path / "torn.json").write_text('{"state": "runn')
    assert read_status(tmp_path / "torn.json") is None
    write_json_atomic(tmp_path / "other.json", {"hello": 1})
    assert read_status(tmp_path / "other.json") is None
    write_json_atomic(tmp_path / "status.json", {"state": "running", "stalled": [3]})
    assert status_from(read_status(tmp_path / "status.json"), 0) == status_from({"state": "running", "stalled": [3]}, 0)
    assert status_from(None, 0) is None
