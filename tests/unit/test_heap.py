"""The watcher hands freed heap back to the system now and then (nbtrain.client.heap)."""

from __future__ import annotations

import platform
import sys

import pytest

from nbtrain.client.heap import TRIM_AFTER_BYTES, TRIM_EVERY_S, release_free_memory, trim_due


def test_a_trim_is_due_only_after_enough_bytes_and_enough_time() -> None:
    assert trim_due(TRIM_AFTER_BYTES, TRIM_EVERY_S)
    assert not trim_due(TRIM_AFTER_BYTES - 1, 10 * TRIM_EVERY_S)  # little was read: nothing to give back
    assert not trim_due(100 * TRIM_AFTER_BYTES, TRIM_EVERY_S / 2)  # too soon after the last one: it costs ~10 ms


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_glibc_gives_freed_memory_back() -> None:
    def rss() -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1])

    blocks = [bytes(50_000) for _ in range(2_000)]  # ~100 MB from the heap (under glibc's mmap threshold)
    keep = blocks[::100]  # a few survivors pin the heap, as a monitor's kept blocks do
    del blocks
    before = rss()
    assert release_free_memory()
    assert rss() < before  # the freed pages around the survivors went back
    assert len(keep) == 20
