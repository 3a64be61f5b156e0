"""Resuming a pod log by timestamp (logresume.py): no line repeated, none skipped, rotation said."""

from __future__ import annotations

from typing import Any

from nbtrain.backends.kubernetes.logresume import Gap, Resume, split_timestamp

T1 = "2026-12-02T02:25:30.100000000Z"
T2 = "2026-12-02T02:25:30.200000000Z"
T3 = "2026-12-02T02:25:31.000000000Z"
T4 = "2026-12-02T02:25:32.5Z"


def _stream(resume: Resume, lines: list[str]) -> list[str]:
    resume.new_stream()
    return resume.feed(lines)


def test_timestamps_of_every_width_and_zone_parse_to_the_same_instant() -> None:
    assert split_timestamp("2026-12-02T02:25:30.1Z a b")[0] == split_timestamp("2026-12-02T02:25:30.100000000Z x")[0]
    assert split_timestamp("2026-12-02T04:25:30+02:00 x")[0] == (split_timestamp("2026-12-02T02:25:30Z x")[0] or (0,))
    assert split_timestamp("no stamp here") == (None, "", "no stamp here")
    assert split_timestamp(f"{T1} [rank0]:hello  world")[2] == "[rank0]:hello  world"


def test_a_new_stream_skips_exactly_what_was_copied_even_when_lines_share_a_timestamp() -> None:
    entry: dict[str, Any] = {}
    resume = Resume(entry)
    assert resume.since_time() is None
    assert _stream(resume, [f"{T1} a", f"{T2} b", f"{T2} c"]) == ["a", "b", "c"]
    assert entry["since"] == T2 and entry["at_since"] == 2 and entry["lines"] == 3
    assert resume.since_time() == "2026-12-02T02:25:30Z"  # whole seconds: the API's sinceTime
    # the server answers from the second: T1's line again, both T2 lines again, then a third T2 line and more
    assert _stream(resume, [f"{T1} a", f"{T2} b", f"{T2} c", f"{T2} d", f"{T3} e"]) == ["d", "e"]
    assert entry["since"] == T3 and entry["at_since"] == 1 and entry["lines"] == 5
    assert resume.gaps == []


def test_lines_rotated_away_are_reported_as_a_gap_and_the_copy_goes_on_from_what_is_kept() -> None:
    entry: dict[str, Any] = {}
    resume = Resume(entry)
    _stream(resume, [f"{T1} a", f"{T2} b"])
    # rotated: the kubelet keeps only lines from T4 on (b and whatever came between are gone)
    assert _stream(resume, [f"{T4} y", f"{T4} z"]) == ["y", "z"]
    assert resume.gaps == [Gap(after=T2, before=T4)]
    assert entry["since"] == T4 and entry["at_since"] == 2


def test_an_entry_from_before_timestamps_resumes_by_count_once() -> None:
    entry: dict[str, Any] = {"name": "p", "node": 0, "lines": 2, "complete": False}
    resume = Resume(entry)
    assert _stream(resume, [f"{T1} a", f"{T2} b", f"{T3} c"]) == ["c"]
    assert _stream(resume, [f"{T3} c", f"{T4} d"]) == ["d"]
