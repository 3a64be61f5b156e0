"""The watcher paces itself: cheap rounds every 0.1 s, dearer ones further apart, within a bounded share of a core."""

from __future__ import annotations

from nbtrain.client.watcher import BYTES_PER_ROUND, MAX_WATCH_PERIOD_S, WATCH_PERIOD_S, WATCH_SHARE, watch_wait


def test_cheap_rounds_come_every_watch_period() -> None:
    assert watch_wait(0.0) == WATCH_PERIOD_S
    assert watch_wait(0.002) == WATCH_PERIOD_S  # a small gang: as responsive as ever


def test_dear_rounds_are_spaced_to_keep_the_watcher_within_its_share_of_a_core() -> None:
    cost = 0.008  # a round over a thousand files
    wait = watch_wait(cost)
    assert WATCH_PERIOD_S < wait < MAX_WATCH_PERIOD_S
    assert abs(cost / (cost + wait) - WATCH_SHARE) < 1e-9


def test_the_wait_never_passes_its_bound() -> None:
    assert watch_wait(10.0) == MAX_WATCH_PERIOD_S


def test_lines_coming_fast_shorten_the_wait_so_a_round_holds_a_bounded_amount() -> None:
    assert watch_wait(10.0, bytes_per_s=BYTES_PER_ROUND / 0.2) == 0.2  # 1M lines/s: rounds of ~4 MB, not 45
    assert watch_wait(10.0, bytes_per_s=BYTES_PER_ROUND / 0.01) == WATCH_PERIOD_S  # never busier than the period
    assert watch_wait(0.002, bytes_per_s=BYTES_PER_ROUND / 0.2) == WATCH_PERIOD_S  # cheap rounds: as before
