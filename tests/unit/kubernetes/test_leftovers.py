"""What ``cancel`` deletes once the run is terminal (the pure decision in leftovers.py)."""

from __future__ import annotations

from typing import Any

import pytest

from nbtrain.backends.kubernetes.leftovers import leftover_reason, live_pods
from nbtrain.model import RunState


def _pod(name: str, phase: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": phase}}


def test_live_pods_are_the_pending_and_running_ones() -> None:
    pods = [_pod("a", "Running"), _pod("b", "Succeeded"), _pod("c", "Pending"), _pod("d", "Failed")]
    assert live_pods(pods) == ["a", "c"]


@pytest.mark.parametrize("state", [RunState.FAILED, RunState.CANCELLED])
def test_a_failed_or_cancelled_runs_workload_that_still_exists_is_deleted(state: RunState) -> None:
    assert leftover_reason(state, True, []) == f"the run is {state.value} and the workload was still there"
    assert leftover_reason(state, False, []) is None  # gone already: nothing to delete


def test_a_success_is_left_for_its_ttl_unless_pods_still_run() -> None:
    assert leftover_reason(RunState.SUCCEEDED, True, []) is None
    assert leftover_reason(RunState.SUCCEEDED, True, ["w-1"]) == "1 of its pods still run or wait (w-1)"
