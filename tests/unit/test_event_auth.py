"""Events on stdout are authenticated: a line is an event only with the marker at its start and a valid tag.

Kubernetes pods report events inside their stdout, next to whatever the training code prints (dataset rows
included), so printed text must never become an event; ``Run.result()`` unpickles what a RESULT carries.
"""

from __future__ import annotations

import hmac
import json
import os
from pathlib import Path

import pytest

from nbtrain.events import (
    STREAM_MARKER,
    Event,
    EventKind,
    StreamEventWriter,
    decode_event_key,
    encode_event_key,
    event_tag,
    new_event_key,
    parse_line,
    parse_stream_line,
    stream_event_line,
)
from nbtrain.view import RunView

KEY = bytes(range(32))
OTHER = bytes(range(1, 33))


def result(seq: int = 3, rank: int = 0, source: str | None = None, attempt: int = 0, payload: str = "R0VOVUlORQ==") -> Event:
    return Event(EventKind.RESULT, source or f"rank-{rank}", seq, 1.0, attempt, rank, {"pickle_b64": payload})


def test_a_tagged_line_round_trips_and_the_tag_is_hmac_sha256_of_the_exact_json() -> None:
    event = result()
    line = stream_event_line(KEY, event)
    text = event.to_json()
    assert line == f"{STREAM_MARKER}{hmac.new(KEY, text.encode(), 'sha256').hexdigest()} {text}"
    assert parse_stream_line(line, key=KEY) == (None, event, "")
    assert parse_stream_line("[rank0]:" + line, key=KEY) == (0, event, "")


@pytest.mark.parametrize("prefix,rank", [("[rank3]:", 3), ("[default3]:", 3), ("[3]:", 3), ("", None)])
def test_torchelastic_prefix_variants_come_before_the_marker(prefix: str, rank: int | None) -> None:
    event = result(rank=3)
    assert parse_stream_line(prefix + stream_event_line(KEY, event), key=KEY) == (rank, event, "")


def tampered(line: str) -> list[str]:
    """Variants of an authentic line that must all be text."""
    head, text = line[: len(STREAM_MARKER) + 65], line[len(STREAM_MARKER) + 65:]
    tag = line[len(STREAM_MARKER): len(STREAM_MARKER) + 64]
    return [
        head + text.replace('"seq":3', '"seq":999999999999'),  # a forged sequence number
        head + text.replace("R0VOVUlORQ==", "ZXZpbA=="),  # a different payload
        head + text + " ",  # trailing text
        STREAM_MARKER + text,  # no tag (the format before tags)
        STREAM_MARKER + "0" * 64 + " " + text,  # a made-up tag
        STREAM_MARKER + tag.upper() + " " + text,  # not the tag's spelling
        STREAM_MARKER + tag[:-1] + " " + text,  # cut tag
        STREAM_MARKER + tag + text,  # no space
        STREAM_MARKER + tag + "  " + text,  # two spaces
        STREAM_MARKER.strip() + tag + " " + text,  # marker without its space
        " " + line,  # not at the start of the line
        "row 17: " + line,  # mid-line, as printed inside a dataset row
        "[rank0]: " + line,  # a space after the prefix is text the rank printed
        "[rank0]:[rank0]:" + line,  # a printed prefix
    ]


def test_tampered_untagged_or_mid_line_lines_are_plain_text() -> None:
    line = stream_event_line(KEY, result())
    for variant in tampered(line):
        _rank, event, text = parse_stream_line(variant, key=KEY)
        assert event is None, variant
        expected = variant[8:] if variant.startswith("[rank0]:") else variant
        assert text == expected


def test_the_wrong_key_or_no_key_makes_every_line_text() -> None:
    line = stream_event_line(KEY, result())
    assert parse_stream_line(line, key=OTHER) == (None, None, line)
    assert parse_stream_line(line, key=None) == (None, None, line)
    assert parse_stream_line("[rank1]:" + line, key=None) == (1, None, line)


def test_a_valid_tag_over_something_that_is_not_an_event_is_text() -> None:
    for text in ('{"v":1,"kind":"nonsense","src":"rank-0","seq":1,"t":0,"rank":0}', "[1,2]", "not json",
                 '{"v":1,"kind":"result","src":"rank-0","seq":1,"t":0,"rank":"0","data":{}}',
                 '{"v":1,"kind":"result","src":"rank-0","seq":1e999,"t":0,"rank":0,"data":{}}'):
        line = f"{STREAM_MARKER}{event_tag(KEY, text)} {text}"
        assert parse_stream_line(line, key=KEY)[1] is None, text


def test_the_tag_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    parse_stream_line(STREAM_MARKER + "0" * 64 + " " + result().to_json(), key=KEY)
    assert len(calls) == 1


def test_keys_are_random_256_bit_and_short_or_malformed_ones_are_refused() -> None:
    key = new_event_key()
    assert len(key) == 32 and key != new_event_key()
    assert decode_event_key(encode_event_key(key)) == key
    assert decode_event_key(encode_event_key(key) + "\n") == key
    assert decode_event_key(encode_event_key(key).encode()) == key
    for bad in (None, "", "abc", "zz" * 32, "00" * 31):
        assert decode_event_key(bad) is None


def test_the_stream_writer_starts_each_event_on_a_line_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "out"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.write(fd, b"progress without newline")
        writer = StreamEventWriter("rank-2", key=KEY, rank=2, fd=fd)
        event = writer.emit(EventKind.METRIC, step=1, values={"loss": 0.5})
        StreamEventWriter("rank-2", key=None, rank=2, fd=fd).emit(EventKind.HEARTBEAT, step=1)  # writes nothing
    finally:
        os.close(fd)
    lines = path.read_text().split("\n")
    assert lines[0] == "progress without newline" and lines[2] == ""
    assert parse_stream_line(lines[1], key=KEY) == (None, event, "")
    assert len(lines) == 3


def test_a_non_integer_rank_is_not_an_event() -> None:
    record = json.loads(result().to_json())
    for rank in ("0", True, 1.5, [0]):
        record["rank"] = rank
        assert parse_line(json.dumps(record)) is None


# -- what the notebook does with a RESULT ----------------------------------------------------------------

def test_a_result_counts_once_and_only_from_rank_0_of_the_current_attempt() -> None:
    view = RunView()
    assert view.apply(result(seq=1, rank=1, payload="ZnJvbSByYW5rIDE="))
    assert view.result_b64 is None
    assert view.apply(result(seq=1, rank=0, source="supervisor", payload="c3VwZXJ2aXNvcg=="))
    assert view.result_b64 is None
    view.apply(result(seq=2, rank=0, payload="Zmlyc3Q="))
    view.apply(result(seq=3, rank=0, payload="c2Vjb25k"))
    assert view.result_b64 == "Zmlyc3Q="
    view.apply(result(seq=1, rank=0, attempt=1, payload="bmV4dCBhdHRlbXB0"))
    assert view.result_b64 == "bmV4dCBhdHRlbXB0"
    view.apply(result(seq=9, rank=0, attempt=0, payload="b2xkIGF0dGVtcHQ="))
    assert view.result_b64 == "bmV4dCBhdHRlbXB0"


def test_the_stream_context_takes_the_key_out_of_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from nbtrain.runtime import context

    monkeypatch.setattr(context, "_current", None)
    monkeypatch.delenv(context.ENV_EVENTS_DIR, raising=False)
    monkeypatch.setenv(context.ENV_RUN_ID, "r-1")
    monkeypatch.setenv(context.ENV_EVENT_STREAM, "stdout")
    monkeypatch.setenv(context.ENV_EVENT_KEY, encode_event_key(KEY))
    monkeypatch.setenv("RANK", "1")
    ctx = context.current()
    try:
        assert ctx is not None and context.ENV_EVENT_KEY not in os.environ
        assert isinstance(ctx.events, StreamEventWriter) and ctx.events._key == KEY
    finally:
        monkeypatch.setattr(context, "_current", None)
