"""Fuzzing the pod-log line parser and splitter: never raises, never yields an event without a valid tag.

Whatever a rank prints — any text, any bytes, pieces that look like markers, tags, rank prefixes or event
JSON — is log text; the only events are the genuine, tagged lines, and each whole genuine line arrives.
"""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from nbtrain.backends.kubernetes.lines import Expect, LineSplitter, Record
from nbtrain.events import STREAM_MARKER, Event, EventKind, parse_line, parse_stream_line, stream_event_line

KEY = bytes(range(32))
WORLD = 3
EXPECT = Expect(KEY, 0, WORLD)


def genuine(rank: int, seq: int) -> Event:
    kind = [EventKind.METRIC, EventKind.HEARTBEAT, EventKind.RESULT, EventKind.RANK_DONE][seq % 4]
    data = {"step": seq, "values": {"loss": 0.5}, "note": "[rank1]: @@nbtrain-event@@ inside"}
    return Event(kind, f"rank-{rank}", seq, 1.0, 0, rank, data)


SAMPLE = stream_event_line(KEY, genuine(0, 1))
FRAGMENTS = [
    "[rank0]:", "[rank1]:", "[rank2]:", "[default1]:", "[1]:", "[rank99]:", STREAM_MARKER, STREAM_MARKER.strip(),
    "0" * 64, "f" * 64, SAMPLE[len(STREAM_MARKER):len(STREAM_MARKER) + 64], " ", "\r", "\x00", "{", "}",
    genuine(0, 2).to_json(), '{"v":1,"kind":"result","src":"rank-0","seq":999999999999,"t":0,"rank":0,'
    '"data":{"pickle_b64":"ZXZpbA=="}}', SAMPLE[: len(SAMPLE) // 2], SAMPLE[len(SAMPLE) // 2:],
]
hostile_text = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=30)), max_size=12).map("".join)
one_line = hostile_text.map(lambda text: text.replace("\n", ""))


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), hostile_text))
def test_arbitrary_text_is_never_an_event(text: str) -> None:
    for line in (text, "[rank0]:" + text, STREAM_MARKER + text, "[rank1]:" + STREAM_MARKER + "0" * 64 + " " + text):
        for key in (KEY, None):
            _, event, _ = parse_stream_line(line, key=key)
            assert event is None
    parse_line(text)  # the trusted-file parser never raises either


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=4096))
def test_arbitrary_bytes_through_the_splitter_are_never_events(data: bytes) -> None:
    splitter = LineSplitter(EXPECT)
    records: list[Record] = []
    for line in data.decode("utf-8", "replace").split("\n"):
        records += splitter.feed(line)
    records += splitter.flush()
    assert all(r.event is None for r in records)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=WORLD - 1), st.integers(min_value=1, max_value=50), st.data())
def test_any_change_to_a_genuine_line_makes_it_text(rank: int, seq: int, data: st.DataObject) -> None:
    line = stream_event_line(KEY, genuine(rank, seq))
    at = data.draw(st.integers(min_value=0, max_value=len(line) - 1))
    new = data.draw(st.characters())
    assume(new != line[at])
    for changed in (line[:at] + new + line[at + 1:], line[:at] + line[at + 1:], line[:at] + new + line[at:]):
        assert parse_stream_line(changed, key=KEY)[1] is None
        assert parse_stream_line(f"[rank{rank}]:" + changed, key=KEY)[1] is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(min_value=0, max_value=WORLD - 1), st.booleans(), one_line), max_size=40))
def test_only_genuine_lines_are_events_and_each_whole_one_arrives_once(stream: list[tuple[int, bool, str]]) -> None:
    splitter = LineSplitter(EXPECT)
    sent: list[Event] = []
    records: list[Record] = []
    seqs = dict.fromkeys(range(WORLD), 0)
    for rank, is_event, text in stream:
        if is_event:
            seqs[rank] += 1
            event = genuine(rank, seqs[rank])
            sent.append(event)
            records += splitter.feed(f"[rank{rank}]:" + stream_event_line(KEY, event))
        else:  # what the rank printed: anything, prefixes and markers included
            records += splitter.feed(f"[rank{rank}]:" + text)
    records += splitter.flush()
    received = [r.event for r in records if r.event is not None]
    assert received == sent
    assert all(r.rank == r.event.rank for r in records if r.event is not None)
