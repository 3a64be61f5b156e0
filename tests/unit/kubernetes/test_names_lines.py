"""DNS-1123 names, and pod log lines back into (rank, event, text) records (events only when authentic)."""

from __future__ import annotations

from typing import Any

import pytest

from nbtrain.backends.kubernetes.lines import Expect, LineSplitter, Record
from nbtrain.backends.kubernetes.names import dns_label, is_dns_label, object_names
from nbtrain.events import STREAM_MARKER, Event, EventKind, stream_event_line


def test_dns_label_shortens_with_a_stable_hash_and_starts_with_a_letter() -> None:
    assert dns_label("digits-3fa9c2") == "digits-3fa9c2"
    assert dns_label("123-abc") == "nbt-123-abc"
    assert dns_label("Weird__Name!!") == "weird-name"
    long = "x" * 100
    short = dns_label(long, 40)
    assert len(short) <= 40 and is_dns_label(short) and short == dns_label(long, 40)
    assert dns_label(long + "y", 40) != short


def test_object_names_leave_room_for_every_pod_hostname() -> None:
    names = object_names("r" * 47 + "-abcdef", flavor="jobset", nodes=1000)
    assert all(is_dns_label(h) for h in names.hostnames)
    assert len(names.hostnames) == 1000
    assert names.main_address == f"{names.hostnames[0]}.{names.base}"
    assert object_names("run-1", flavor="job", nodes=2, attempt=1).base == "run-1-a1"
    assert object_names("run-1", flavor="pytorchjob", nodes=2).main_address == "$(MASTER_ADDR)"


KEY = bytes(range(32))
EXPECT = Expect(KEY, 0, 4)


def _event(seq: int, data: dict, rank: int = 0, kind: EventKind = EventKind.METRIC, **fields: Any) -> Event:  # type: ignore[type-arg]
    return Event(kind, fields.pop("source", f"rank-{rank}"), seq, 1.0, fields.pop("attempt", 0), rank, data)


def _event_line(seq: int, data: dict, rank: int = 0, key: bytes = KEY, **fields: Any) -> str:  # type: ignore[type-arg]
    return stream_event_line(key, _event(seq, data, rank, **fields))


def _texts(records: list[Record]) -> list[tuple[int | None, str | None]]:
    return [(r.rank, r.text) for r in records]


def test_plain_prefixed_and_launcher_lines() -> None:
    splitter = LineSplitter(EXPECT)
    assert _texts(splitter.feed("[rank3]:hello")) == [(3, "hello")]
    assert _texts(splitter.feed("[default1]:hi")) == [(1, "hi")]
    assert _texts(splitter.feed("W1129 launcher says")) == [(None, "W1129 launcher says")]


def test_output_without_newline_glued_to_another_ranks_line_is_split_and_rejoined() -> None:
    splitter = LineSplitter(EXPECT)
    first = splitter.feed("[rank0]:50%[rank1]:hello from 1")
    assert _texts(first) == [(1, "hello from 1")]
    assert _texts(splitter.feed("[rank0]: done")) == [(0, "50% done")]


def test_an_event_line_cut_in_two_by_the_tee_is_reassembled() -> None:
    line = _event_line(7, {"step": 1, "values": {"loss": 0.5}, "note": "[rank1]: inside json"})
    splitter = LineSplitter(EXPECT)
    head = splitter.feed("[rank0]:" + line[:30] + "[rank1]:other rank")
    assert _texts(head) == [(1, "other rank")]
    tail = splitter.feed("[rank0]:" + line[30:])
    assert len(tail) == 1 and tail[0].event is not None and tail[0].event.seq == 7 and tail[0].rank == 0


def test_the_blank_line_the_runtime_writes_before_an_event_is_dropped_and_the_users_own_are_kept() -> None:
    splitter = LineSplitter(EXPECT)
    # what rank 0 wrote: "a\n" "\n<event 1>\n" "\n" (its own blank line) "\n<event 2>\n" "b\n" and, at the end, "\n"
    records: list[Record] = []
    for line in ["[rank0]:a", "[rank0]:", "[rank0]:" + _event_line(1, {}), "[rank0]:", "[rank0]:",
                 "[rank0]:" + _event_line(2, {}), "[rank0]:b", "[rank0]:"]:
        records += splitter.feed(line)
    records += splitter.flush()
    shown = [(r.text if r.event is None else r.event.seq) for r in records]
    assert shown == ["a", 1, "", 2, "b", ""]


def test_text_printed_without_a_newline_before_an_event_stays_text_and_the_event_arrives() -> None:
    splitter = LineSplitter(EXPECT)
    # the runtime's leading newline ends the user's "progress": the event starts a line of its own
    records = splitter.feed("[rank0]:progress") + splitter.feed("[rank0]:" + _event_line(1, {"step": 0, "values": {}}))
    assert [(r.text, r.event is not None) for r in records] == [("progress", False), (None, True)]
    splitter.feed("[rank2]:no newline yet[rank0]:x")
    assert _texts(splitter.flush()) == [(2, "no newline yet")]


def test_a_marker_mid_line_is_text_even_with_a_valid_tag() -> None:
    splitter = LineSplitter(EXPECT)
    line = "[rank0]:progress" + _event_line(1, {"step": 0, "values": {}})
    assert _texts(splitter.feed(line)) == [(0, line[len("[rank0]:"):])]


@pytest.mark.parametrize("line", [
    "[rank1]:" + _event_line(1, {}, rank=1, key=bytes(32)),  # another key
    "[rank1]:" + _event_line(1, {}, rank=0),  # rank 0's event on rank 1's line
    "[rank1]:" + _event_line(1, {}, rank=1, attempt=1),  # another attempt
    "[rank1]:" + _event_line(1, {}, rank=1, source="kubernetes"),  # not a rank's source
    "[rank1]:" + _event_line(1, {"reason": "x"}, rank=1, kind=EventKind.FAILURE),  # the verdict is not a rank's to send
    "[rank1]:" + _event_line(1, {"state": "succeeded"}, rank=1, kind=EventKind.STATE),
    "[rank7]:" + _event_line(1, {}, rank=7),  # no such rank (world 4)
    "[rank1]:" + STREAM_MARKER + _event(1, {}, rank=1).to_json(),  # untagged
])
def test_lines_that_are_not_this_attempts_events_are_their_ranks_text(line: str) -> None:
    splitter = LineSplitter(EXPECT)
    records = splitter.feed(line) + splitter.flush()
    assert [r.event for r in records] == [None]
    assert records[0].rank == int(line[5]) and records[0].text == line[len("[rankN]:"):]


def test_without_a_key_nothing_is_an_event() -> None:
    splitter = LineSplitter(Expect(None, 0, 4))
    line = "[rank0]:" + _event_line(1, {})
    assert _texts(splitter.feed(line)) == [(0, line[8:])]


def test_a_printed_prefix_stays_with_the_rank_that_printed_it() -> None:
    splitter = LineSplitter(EXPECT)
    assert _texts(splitter.feed("[rank1]:[rank0]:hello")) == [(1, "[rank0]:hello")]
    assert _texts(splitter.feed("[rank1]:[rank0]:" + _event_line(1, {}))) == [(1, "[rank0]:" + _event_line(1, {}))]


def test_printed_text_cannot_swallow_a_whole_genuine_event() -> None:
    splitter = LineSplitter(EXPECT)
    # rank 1 prints something that looks like an unfinished piece of rank 0's output
    assert _texts(splitter.feed("[rank1]:x[rank0]:junk[rank1]:y")) == [(1, "xy")]
    records = splitter.feed("[rank0]:" + _event_line(5, {"step": 0, "values": {}}))
    assert [(r.text, r.event.seq if r.event else None) for r in records] == [("junk", None), (None, 5)]


def test_record_reprs_never_show_the_key() -> None:
    assert KEY.hex() not in repr(EXPECT) and str(KEY) not in repr(EXPECT)


def test_every_kind_the_runtime_reports_is_accepted_from_its_rank() -> None:
    import re
    from pathlib import Path

    import nbtrain.runtime

    runtime = Path(nbtrain.runtime.__file__).parent
    kinds = {EventKind[name] for path in runtime.glob("*.py")
             for name in re.findall(r"EventKind\.([A-Z_]+)", path.read_text())}
    assert EventKind.RESULT in kinds and EventKind.RANK_DONE in kinds
    for kind in kinds:
        splitter = LineSplitter(EXPECT)
        (record,) = splitter.feed("[rank2]:" + stream_event_line(KEY, _event(1, {}, rank=2, kind=kind)))
        assert record.event is not None and record.event.kind is kind, kind
