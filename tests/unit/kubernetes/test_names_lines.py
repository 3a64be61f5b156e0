"""DNS-1123 names, and pod log lines back into (rank, event, text) records."""

from __future__ import annotations

from nbtrain.backends.kubernetes.lines import LineSplitter
from nbtrain.backends.kubernetes.names import dns_label, is_dns_label, object_names
from nbtrain.events import STREAM_MARKER, Event, EventKind


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


def _event_line(seq: int, data: dict) -> str:  # type: ignore[type-arg]
    return STREAM_MARKER + Event(EventKind.METRIC, "rank-0", seq, 1.0, 0, 0, data).to_json()


def test_plain_prefixed_and_launcher_lines() -> None:
    splitter = LineSplitter()
    assert [(r.rank, r.text) for r in splitter.feed("[rank3]:hello")] == [(3, "hello")]
    assert [(r.rank, r.text) for r in splitter.feed("[default1]:hi")] == [(1, "hi")]
    assert [(r.rank, r.text) for r in splitter.feed("W1129 launcher says")] == [(None, "W1129 launcher says")]


def test_output_without_newline_glued_to_another_ranks_line_is_split_and_rejoined() -> None:
    splitter = LineSplitter()
    first = splitter.feed("[rank0]:50%[rank1]:hello from 1")
    assert [(r.rank, r.text) for r in first] == [(1, "hello from 1")]
    assert [(r.rank, r.text) for r in splitter.feed("[rank0]: done")] == [(0, "50% done")]


def test_an_event_line_cut_in_two_by_the_tee_is_reassembled() -> None:
    line = _event_line(7, {"step": 1, "values": {"loss": 0.5}, "note": "[rank1]: inside json"})
    splitter = LineSplitter()
    head = splitter.feed("[rank0]:" + line[:30] + "[rank1]:other rank")
    assert [(r.rank, r.text) for r in head] == [(1, "other rank")]
    tail = splitter.feed("[rank0]:" + line[30:])
    assert len(tail) == 1 and tail[0].event is not None and tail[0].event.seq == 7 and tail[0].rank == 0


def test_text_before_an_event_marker_is_kept_and_leftovers_flush_at_the_end() -> None:
    splitter = LineSplitter()
    records = splitter.feed("[rank0]:progress" + _event_line(1, {"step": 0, "values": {}}))
    assert [(r.text, r.event is not None) for r in records] == [("progress", False), (None, True)]
    splitter.feed("[rank2]:no newline yet[rank0]:x")
    assert [(r.rank, r.text) for r in splitter.flush()] == [(2, "no newline yet")]
