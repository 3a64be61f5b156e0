"""The one verdict rule (nbtrain/backends/verdict.py), without processes: observations in, decision out."""

from __future__ import annotations

from nbtrain.backends.verdict import Cause, Clock, Observation, Rules, decide
from nbtrain.model import RunState

RULES = Rules(done_grace_s=3.0, failure_settle_s=0.3, cancel_wait_s=45.0)


def run(observations: list[Observation], rules: Rules = RULES) -> list[tuple[RunState | None, Cause, bool]]:
    clock = Clock()
    out = []
    for obs in observations:
        decision = decide(obs, clock, rules)
        clock = decision.clock
        out.append((decision.verdict, decision.cause, decision.end_gang))
    return out


def test_a_running_gang_has_no_verdict() -> None:
    assert run([Observation(now=0.0, world=4, ranks_done=2)]) == [(None, Cause.NONE, False)]


def test_every_rank_done_and_the_gang_gone_is_success() -> None:
    assert run([Observation(now=0.0, world=2, ranks_done=2, gang_ended=True)])[-1] == (
        RunState.SUCCEEDED, Cause.DONE, False)


def test_every_rank_done_but_a_launcher_lingers_is_success_after_the_grace_and_the_gang_is_ended() -> None:
    seen = run([Observation(now=t, world=2, ranks_done=2) for t in (0.0, 2.9, 3.1)])
    assert seen[:2] == [(None, Cause.DONE, False)] * 2
    assert seen[2] == (RunState.SUCCEEDED, Cause.DONE, True)


def test_a_clean_run_whose_teardown_aborts_is_still_a_success() -> None:
    """gloo teardown SIGABRT after every rank reported done: launchers exit non-zero."""
    assert run([Observation(now=0.0, world=2, ranks_done=2, gang_ended=True, gang_clean=False,
                            rank_failed=True)])[-1][0] is RunState.SUCCEEDED


def test_cancel_ends_the_gang_first_and_is_cancelled_once_it_is_gone() -> None:
    seen = run([Observation(now=0.0, world=2, cancel_requested=True),
                Observation(now=0.1, world=2, cancel_requested=True, gang_ended=True)])
    assert seen == [(None, Cause.CANCELLED, True), (RunState.CANCELLED, Cause.CANCELLED, False)]


def test_a_cancel_that_never_completes_is_cancelled_after_the_wait() -> None:
    seen = run([Observation(now=t, world=2, cancel_requested=True) for t in (0.0, 46.0)])
    assert seen[-1] == (RunState.CANCELLED, Cause.CANCELLED, True)


def test_timeout_fails_and_ends_the_gang() -> None:
    assert run([Observation(now=0.0, world=2, timed_out=True)]) == [(RunState.FAILED, Cause.TIMEOUT, True)]


def test_a_failed_rank_waits_the_settle_window_then_fails_and_ends_the_gang() -> None:
    seen = run([Observation(now=t, world=4, rank_failed=True) for t in (0.0, 0.2, 0.31)])
    assert seen == [(None, Cause.RANK_FAILED, False)] * 2 + [(RunState.FAILED, Cause.RANK_FAILED, True)]


def test_a_gang_that_ended_badly_fails_once_the_logs_are_drained_or_the_drain_time_passed() -> None:
    seen = run([Observation(now=0.0, world=2, gang_ended=True, logs_drained=False),
                Observation(now=5.0, world=2, gang_ended=True, logs_drained=True)])
    assert seen == [(None, Cause.ENDED, False), (RunState.FAILED, Cause.ENDED, False)]
    seen = run([Observation(now=t, world=2, gang_ended=True, logs_drained=False) for t in (0.0, 999.0)])
    assert seen[-1] == (None, Cause.ENDED, False)  # the controller bounds the wait (no copy progress): not a clock


def test_a_gang_that_ended_cleanly_without_done_reports_is_a_success() -> None:
    assert run([Observation(now=0.0, world=2, gang_ended=True, gang_clean=True)])[-1][0] is RunState.SUCCEEDED


def test_done_beats_cancel_and_cancel_beats_failure() -> None:
    assert run([Observation(now=0.0, world=1, ranks_done=1, gang_ended=True, cancel_requested=True)])[-1][0] \
        is RunState.SUCCEEDED
    assert run([Observation(now=0.0, world=2, cancel_requested=True, rank_failed=True, gang_ended=True)])[-1][0] \
        is RunState.CANCELLED


def test_every_rank_done_beats_a_timeout_hit_while_a_launcher_lingers() -> None:
    """The work finished in time; only the teardown outlived --timeout: a success, the gang is ended."""
    seen = run([Observation(now=t, world=2, ranks_done=2, timed_out=True) for t in (0.0, 3.5)])
    assert seen[-1] == (RunState.SUCCEEDED, Cause.DONE, True)


def test_a_full_store_fails_the_run_at_once_even_when_every_rank_finished() -> None:
    assert run([Observation(now=0.0, world=2, ranks_done=2, store_full=True)]) == [
        (RunState.FAILED, Cause.STORE_FULL, True)]
    assert run([Observation(now=0.0, world=2, store_full=True, cancel_requested=True, gang_ended=True)])[-1][0] \
        is RunState.CANCELLED


def test_success_waits_for_the_logs_to_be_in_the_store() -> None:
    seen = run([Observation(now=0.0, world=2, ranks_done=2, gang_ended=True, logs_drained=False),
                Observation(now=60.0, world=2, ranks_done=2, gang_ended=True, logs_drained=True)])
    assert seen == [(None, Cause.DONE, False), (RunState.SUCCEEDED, Cause.DONE, False)]


def test_a_gang_that_ended_cleanly_is_a_success_only_once_its_logs_are_in() -> None:
    seen = run([Observation(now=0.0, world=2, gang_ended=True, gang_clean=True, logs_drained=False),
                Observation(now=9.0, world=2, gang_ended=True, gang_clean=True, logs_drained=True)])
    assert seen == [(None, Cause.ENDED, False), (RunState.SUCCEEDED, Cause.ENDED, False)]
