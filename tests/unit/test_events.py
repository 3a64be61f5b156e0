"""Events: JSON lines that survive crashes, re-reads and several writing threads."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import pytest

from nbtrain.events import SCHEMA_VERSION, Event, EventKind, EventWriter, FileTail, parse_line, read_events


def _event(**changes: object) -> Event:
    values: dict[str, object] = {
        "kind": EventKind.METRIC,
        "source": "rank-3",
        "seq": 7,
        "time": 1700000000.25,
        "attempt": 1,
        "rank": 3,
        "data": {"step": 10, "values": {"loss": 0.5}, "total": 100},
    }
    values.update(changes)
    return Event(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "event",
    [
        _event(),
        _event(kind=EventKind.STATE, source="supervisor", rank=None, data={"state": "running", "reason": ""}),
        _event(kind=EventKind.RANK_ERROR, data={"exc_type": "ValueError", "message": "ünïcode ✓", "traceback": "a\nb"}),
        _event(data={}),
    ],
)
def test_event_json_round_trip(event: Event) -> None:
    line = event.to_json()
    assert "\n" not in line
    assert Event.from_json(line) == event
    assert parse_line(line) == event


def test_json_line_carries_the_schema_version() -> None:
    assert json.loads(_event().to_json())["v"] == SCHEMA_VERSION


def test_nan_metrics_survive_the_round_trip() -> None:
    event = _event(data={"step": 1, "values": {"loss": float("nan")}})
    restored = Event.from_json(event.to_json())
    assert restored is not None
    assert math.isnan(restored.data["values"]["loss"])


def test_number_likes_and_paths_are_serialised() -> None:
    class Scalar:  # what numpy / torch scalars look like to json: an object with .item()
        def item(self) -> float:
            return 0.25

    event = _event(data={"step": 1, "values": {"loss": Scalar()}, "path": Path("/ckpt/step-1"), "ids": (1, 2)})
    restored = Event.from_json(event.to_json())
    assert restored is not None
    assert restored.data == {"step": 1, "values": {"loss": 0.25}, "path": "/ckpt/step-1", "ids": [1, 2]}


def test_unknown_kind_or_newer_schema_is_ignored_not_an_error() -> None:
    record = json.loads(_event().to_json())
    assert Event.from_json(json.dumps({**record, "kind": "from_the_future"})) is None
    assert Event.from_json(json.dumps({**record, "v": SCHEMA_VERSION + 1})) is None


@pytest.mark.parametrize("line", ["", "   ", "{not json", '{"kind": "metric"}', '{"v": "x", "kind": "metric"}'])
def test_parse_line_returns_none_for_blank_or_corrupt_lines(line: str) -> None:
    assert parse_line(line) is None


@pytest.mark.parametrize("line", ["42", "null", "[1, 2]"])
def test_parse_line_returns_none_for_json_that_is_not_an_object(line: str) -> None:
    assert parse_line(line) is None


def test_writer_numbers_events_from_one(tmp_path: Path) -> None:
    path = tmp_path / "events" / "rank-0.jsonl"  # parent created on demand
    writer = EventWriter(path, "rank-0", attempt=2, rank=0)
    try:
        first = writer.emit(EventKind.RANK_START, node=0, local_rank=0, pid=1, host="h")
        second = writer.emit(EventKind.METRIC, step=1, values={"loss": 1.0})
    finally:
        writer.close()
    assert (first.seq, second.seq) == (1, 2)
    on_disk = list(read_events(path))
    assert on_disk == [first, second]
    assert all(e.attempt == 2 and e.rank == 0 and e.source == "rank-0" for e in on_disk)


def test_reopened_writer_continues_the_sequence(tmp_path: Path) -> None:
    path = tmp_path / "supervisor.jsonl"
    writer = EventWriter(path, "supervisor")
    for _ in range(3):
        writer.emit(EventKind.HEARTBEAT, step=None)
    writer.close()
    again = EventWriter(path, "supervisor")
    try:
        assert again.emit(EventKind.NOTICE, message="back").seq == 4
    finally:
        again.close()
    assert [e.seq for e in read_events(path)] == [1, 2, 3, 4]


def test_emit_after_close_raises_oserror(tmp_path: Path) -> None:
    writer = EventWriter(tmp_path / "a.jsonl", "a")
    writer.close()
    writer.close()  # closing twice is harmless
    with pytest.raises(OSError):
        writer.emit(EventKind.NOTICE, message="late")


def test_several_threads_writing_produce_whole_lines_and_unique_seqs(tmp_path: Path) -> None:
    path = tmp_path / "rank-0.jsonl"
    writer = EventWriter(path, "rank-0", rank=0)
    threads_n, per_thread = 8, 150
    start = threading.Barrier(threads_n)

    def work(index: int) -> None:
        start.wait()
        for step in range(per_thread):
            writer.emit(EventKind.METRIC, step=step, values={f"t{index}": float(step)}, pad="x" * 200)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    writer.close()

    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == threads_n * per_thread
    events = [parse_line(line) for line in lines]
    assert all(e is not None for e in events)
    seqs = [e.seq for e in events if e is not None]
    assert sorted(seqs) == list(range(1, threads_n * per_thread + 1))
    assert seqs == sorted(seqs)  # file order is sequence order


def test_file_tail_returns_only_complete_lines_and_remembers_its_place(tmp_path: Path) -> None:
    path = tmp_path / "log"
    tail = FileTail(path)
    assert tail.read_lines() == []  # no file yet
    path.write_bytes(b"one\ntw")
    assert tail.read_lines() == ["one"]
    assert tail.read_lines() == []  # "tw" is still being written
    with open(path, "ab") as handle:
        handle.write(b"o\nthree\n")
    assert tail.read_lines() == ["two", "three"]
    assert tail.read_lines() == []
    assert tail.offset == path.stat().st_size


def test_file_tail_can_resume_from_a_saved_offset(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"a\nb\n")
    first = FileTail(path)
    assert first.read_lines() == ["a", "b"]
    with open(path, "ab") as handle:
        handle.write(b"c\n")
    assert FileTail(path, first.offset).read_lines() == ["c"]


def test_file_tail_delivers_an_enormous_line_cut_rather_than_stalling(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"x" * 100)
    tail = FileTail(path)
    assert tail.read_lines(max_bytes=40) == ["x" * 40]
    assert tail.offset == 40


def test_read_events_skips_a_partial_last_line_and_corrupt_lines(tmp_path: Path) -> None:
    path = tmp_path / "rank-1.jsonl"
    writer = EventWriter(path, "rank-1", rank=1)
    first = writer.emit(EventKind.METRIC, step=1, values={"loss": 1.0})
    writer.close()
    unknown = json.loads(first.to_json()) | {"kind": "from_the_future", "seq": 2}
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("garbage that is not json\n")
        handle.write(json.dumps(unknown) + "\n")
        handle.write("\n")
        handle.write(_event(source="rank-1", seq=3, rank=1).to_json() + "\n")
        handle.write(first.to_json()[:25])  # a crash mid-write
    events = list(read_events(path))
    assert [e.seq for e in events] == [1, 3]


def test_read_events_on_a_missing_file_yields_nothing(tmp_path: Path) -> None:
    assert list(read_events(tmp_path / "absent.jsonl")) == []


def test_reopened_writer_after_a_crash_mid_line_loses_no_event(tmp_path: Path) -> None:
    path = tmp_path / "supervisor.jsonl"
    writer = EventWriter(path, "supervisor")
    writer.emit(EventKind.NOTICE, message="before")
    writer.close()
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"v":1,"kind":"notice","src":"sup')  # the previous process died here
    again = EventWriter(path, "supervisor")
    try:
        again.emit(EventKind.NOTICE, message="after the restart")
    finally:
        again.close()
    assert [e.data["message"] for e in read_events(path)] == ["before", "after the restart"]
