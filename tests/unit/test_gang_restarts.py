"""The one restart policy: only a FAILED, uncancelled attempt with budget left and a place to go restarts."""

from __future__ import annotations

from nbtrain.gang.restarts import Restart, restarts_here, will_retry
from nbtrain.model import RunState


def test_a_failed_attempt_with_budget_restarts_where_its_engine_places_it() -> None:
    assert will_retry(state=RunState.FAILED, cancelled=False, attempt=0, restart_budget=2)
    assert restarts_here(state=RunState.FAILED, cancelled=False, attempt=1, restart_budget=2)
    outside = dict(state=RunState.FAILED, cancelled=False, attempt=0, restart_budget=1,
                   placement=Restart.NEW_ALLOCATION)
    assert will_retry(**outside) and not restarts_here(**outside)  # retrying, submitted from outside


def test_no_restart_when_cancelled_spent_succeeded_or_nowhere_to_go() -> None:
    assert not will_retry(state=RunState.FAILED, cancelled=True, attempt=0, restart_budget=3)
    assert not will_retry(state=RunState.FAILED, cancelled=False, attempt=3, restart_budget=3)
    assert not will_retry(state=RunState.SUCCEEDED, cancelled=False, attempt=0, restart_budget=3)
    assert not will_retry(state=RunState.CANCELLED, cancelled=False, attempt=0, restart_budget=3)
    assert not will_retry(state=RunState.FAILED, cancelled=False, attempt=0, restart_budget=3, placement=Restart.NONE)
