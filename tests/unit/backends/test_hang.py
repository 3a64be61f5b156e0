"""Hang assessment (nbtrain/backends/hang.py) from progress reports, without processes."""

from __future__ import annotations

from nbtrain.backends.hang import RankProgress, assess, effective_stall_after


def test_progress_is_not_a_hang_and_a_gang_still_starting_is_not_either() -> None:
    reports = {0: RankProgress(0, idle_s=1.0, collectives=3), 1: RankProgress(1, idle_s=2.0, collectives=3)}
    assert assess(reports, world=2, stall_after=10) is None
    assert assess({0: RankProgress(0, idle_s=99.0)}, world=2, stall_after=10) is None


def test_a_rank_stuck_in_its_own_code_is_named_while_the_other_waits_in_the_collective() -> None:
    reports = {0: RankProgress(0, idle_s=12.0, collectives=1, in_collective="all_reduce", step=4),
               1: RankProgress(1, idle_s=12.5, collectives=0, step=4)}
    found = assess(reports, world=2, stall_after=10)
    assert found is not None and found.kind == "stuck"
    assert found.culprits == (1,) and found.stalled == (0, 1) and found.collective == "all_reduce"
    assert "rank 1 stuck outside any collective while rank 0 wait in all_reduce" in found.message


def test_a_skipped_all_reduce_is_a_desync_not_a_timeout() -> None:
    reports = {0: RankProgress(0, idle_s=30.0, collectives=2, in_collective="all_reduce"),
               1: RankProgress(1, idle_s=0.0, collectives=1, done=True)}
    found = assess(reports, world=2, stall_after=10)
    assert found is not None and found.kind == "desync"
    assert found.culprits == (1,)
    assert "rank 1 finished after 1 collective(s)" in found.message and "all_reduce #2" in found.message


def test_different_collectives_at_the_same_count_are_a_desync() -> None:
    reports = {0: RankProgress(0, idle_s=30.0, collectives=2, in_collective="all_reduce"),
               1: RankProgress(1, idle_s=30.0, collectives=2, in_collective="barrier")}
    found = assess(reports, world=2, stall_after=10)
    assert found is not None and found.kind == "desync"


def test_everyone_in_the_same_collective_means_a_peer_or_the_network() -> None:
    reports = {r: RankProgress(r, idle_s=40.0, collectives=5, in_collective="all_reduce") for r in range(4)}
    found = assess(reports, world=4, stall_after=10)
    assert found is not None and found.kind == "waiting" and "all_reduce #5" in found.message


def test_one_straggler_among_progressing_ranks_is_stalled_alone() -> None:
    reports = {0: RankProgress(0, idle_s=0.5, collectives=9), 1: RankProgress(1, idle_s=11.0, collectives=9, step=7)}
    found = assess(reports, world=2, stall_after=10)
    assert found is not None and found.stalled == (1,) and found.culprits == (1,)
    assert "last step 7" in found.message


def test_the_threshold_in_force() -> None:
    assert effective_stall_after(300, None) == 300
    assert effective_stall_after(300, 20) == 20
    assert effective_stall_after(None, None) == 0.0


def test_a_rank_waiting_for_a_straggler_still_on_its_way_is_not_a_hang() -> None:
    reports = {0: RankProgress(0, idle_s=30.0, collectives=2, in_collective="all_reduce"),
               1: RankProgress(1, idle_s=1.0, collectives=1, step=9)}
    assert assess(reports, world=2, stall_after=10) is None


def test_a_rank_still_starting_within_the_threshold_is_not_judged() -> None:
    # rank 1 started 4 s ago (imports, data loading) and has made no progress yet: rank 0 waiting for it is fine
    reports = {0: RankProgress(0, idle_s=30.0, collectives=1, in_collective="all_reduce"),
               1: RankProgress(1, idle_s=4.0, progressed=False)}
    assert assess(reports, world=2, stall_after=10) is None


def test_a_rank_that_never_started_progressing_while_others_did_is_named() -> None:
    reports = {0: RankProgress(0, idle_s=30.0, collectives=1, in_collective="all_reduce", step=0),
               1: RankProgress(1, idle_s=31.0, progressed=False)}
    found = assess(reports, world=2, stall_after=10)
    assert found is not None and found.kind == "stuck" and found.culprits == (1,)
    assert "rank 1 is in its own code, outside any collective, and made no progress since it started" in found.message


def test_a_whole_gang_silent_since_it_started_is_stalled() -> None:
    reports = {r: RankProgress(r, idle_s=12.0 + r, progressed=False) for r in range(3)}
    found = assess(reports, world=3, stall_after=10)
    assert found is not None and found.stalled == (0, 1, 2) and found.culprits == (0, 1, 2)
    assert "the whole gang has been silent since it started" in found.message
    assert assess({r: RankProgress(r, idle_s=9.0, progressed=False) for r in range(3)}, world=3, stall_after=10) is None


def test_a_rank_that_has_not_started_yet_keeps_the_gang_unjudged() -> None:
    assert assess({0: RankProgress(0, idle_s=99.0, progressed=False)}, world=2, stall_after=10) is None
