"""StoreCursor reads a run's files in bulk: every event and every log line exactly once, lines as blocks of bytes."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from nbtrain.backends import storecursor
from nbtrain.backends.storecursor import LogLines, StoreCursor
from nbtrain.events import EventKind, EventWriter, FileTail, LineBlock
from nbtrain.model import LogLine
from nbtrain.store import Store


def _append(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as handle:
        handle.write(data)


@pytest.fixture
def run(tmp_path: Path) -> tuple[Store, str]:
    store = Store(tmp_path / "home")
    (store.attempt_dir("r-1", 0) / "logs").mkdir(parents=True)
    return store, "r-1"


def _budget(left: int) -> storecursor._KeptOpen:
    budget = storecursor._KeptOpen()
    budget._left = left
    return budget


def _logs(store: Store, attempt: int = 0) -> Path:
    return store.attempt_dir("r-1", attempt) / "logs"


def test_file_tail_reads_blocks_of_complete_lines_and_counts_them(tmp_path: Path) -> None:
    path = tmp_path / "rank-0.log"
    tail = FileTail(path, keep_open=True)
    assert tail.read_block() == (b"", 0)  # no file yet
    _append(path, b"one\ntwo\nthr")
    assert tail.read_block() == (b"one\ntwo\n", 2) and tail.lines == 2
    assert tail.read_block() == (b"", 0)  # "thr" is still being written
    _append(path, b"ee\n")
    assert tail.read_block() == (b"three\n", 1) and tail.lines == 3 and tail.offset == path.stat().st_size
    assert FileTail.texts(b"a\n\xff\n") == ["a", "\ufffd"]  # invalid UTF-8 is replaced, never raised
    _append(path, b"x" * 100)
    assert tail.read_block(max_bytes=40) == (b"x" * 40, 1)  # an enormous line comes cut rather than never
    tail.close()
    _append(path, b"\n")
    assert tail.read_lines() == ["x" * 60] and tail.lines == 5  # reopened where it was


def test_file_tail_reads_more_than_its_first_read_in_one_block(tmp_path: Path) -> None:
    path = tmp_path / "rank-0.log"
    lines = [f"line {i:06d} " + "x" * (i % 50) for i in range(20_000)]  # ~800 KB: more than one first read
    _append(path, "".join(line + "\n" for line in lines).encode() + b"partial")
    for keep_open in (True, False):
        tail = FileTail(path, keep_open=keep_open)
        data, count = tail.read_block()
        assert count == 20_000 and FileTail.texts(data) == lines and tail.offset == len(data)
        small = FileTail(path, keep_open=keep_open)
        data, count = small.read_block(max_bytes=100_000)  # a smaller window: the lines that fit, complete
        assert 0 < count < 20_000 and FileTail.texts(data) == lines[:count] and data.endswith(b"\n")
        tail.close()
        small.close()


def test_a_block_decodes_only_its_tail() -> None:
    block = LineBlock(3, 0, 10, 4, b"a\nbb\nccc\ndddd\n")
    assert block.texts() == ["a", "bb", "ccc", "dddd"]
    assert block.tail(2) == ["ccc", "dddd"] and block.tail(9) == block.texts() and block.tail(0) == []
    assert block.data[block.tail_offset(1):] == b"dddd\n"


def test_lines_come_as_one_block_per_rank_numbered_as_in_the_log(run: tuple[Store, str]) -> None:
    store, run_id = run
    _append(_logs(store) / "rank-0.log", b"r0 a\nr0 b\n")
    _append(_logs(store) / "rank-1.log", b"r1 a\n")
    _append(_logs(store) / "rank-1.log.bak", b"not a rank log\n")
    cursor = StoreCursor(store, run_id)
    batch = cursor.poll()
    assert isinstance(batch.lines, LogLines)
    assert [(b.rank, b.attempt, b.first, b.count) for b in batch.lines.blocks] == [(0, 0, 0, 2), (1, 0, 0, 1)]
    assert list(batch.lines) == [LogLine(0, "r0 a"), LogLine(0, "r0 b"), LogLine(1, "r1 a")]
    assert len(batch.lines) == 3 and batch.lines[-1] == LogLine(1, "r1 a") and batch.lines[1:2] == (LogLine(0, "r0 b"),)
    assert batch.lines == (LogLine(0, "r0 a"), LogLine(0, "r0 b"), LogLine(1, "r1 a"))
    _append(_logs(store) / "rank-0.log", b"r0 c\n")
    again = cursor.poll()
    assert [(b.rank, b.first, b.count) for b in again.lines.blocks] == [(0, 2, 1)]  # type: ignore[attr-defined]
    assert cursor.poll().lines == () and cursor.poll().events == ()  # the cursor keeps its position


def test_max_lines_zero_reads_events_only_and_leaves_the_lines_for_later(run: tuple[Store, str]) -> None:
    store, run_id = run
    writer = EventWriter(store.attempt_dir(run_id, 0) / "events" / "rank-0.jsonl", "rank-0", rank=0)
    writer.emit(EventKind.METRIC, step=1, values={"loss": 0.5})
    _append(_logs(store) / "rank-0.log", b"line\n")
    cursor = StoreCursor(store, run_id)
    first = cursor.poll(max_lines=0)
    assert [e.kind for e in first.events] == [EventKind.METRIC] and first.lines == ()
    assert list(cursor.poll().lines) == [LogLine(0, "line")]


@pytest.mark.parametrize("skip_idle", [False, True])
def test_every_line_exactly_once_while_ranks_write_and_attempts_follow(run: tuple[Store, str],
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       skip_idle: bool) -> None:
    store, run_id = run
    monkeypatch.setattr(storecursor, "_KEPT_OPEN", _budget(3))  # some files kept open, the others reopened
    lines_each = 1000

    def write(rank: int, attempt: int) -> None:
        for start in range(0, lines_each, 7):  # uneven writes: lines are cut across reads
            text = "".join(f"a{attempt} r{rank} {i}\n" for i in range(start, min(start + 7, lines_each)))
            data = text.encode()
            _append(_logs(store, attempt) / f"rank-{rank}.log", data[:5])
            _append(_logs(store, attempt) / f"rank-{rank}.log", data[5:])

    cursor = StoreCursor(store, run_id)
    seen: list[LogLine] = []
    numbered: dict[tuple[int, int], int] = {}
    for attempt in (0, 1):
        writers = [threading.Thread(target=write, args=(rank, attempt)) for rank in range(4)]
        for thread in writers:
            thread.start()
        while any(t.is_alive() for t in writers):
            batch = cursor.poll(max_lines=50, skip_idle=skip_idle)  # a small budget: the rest waits
            for block in batch.lines.blocks:  # type: ignore[attr-defined]
                assert block.first == numbered.get((block.attempt, block.rank), 0)
                numbered[(block.attempt, block.rank)] = block.first + block.count
            seen.extend(batch.lines)
        for thread in writers:
            thread.join()
        seen.extend(cursor.poll(max_lines=10**9).lines)
    expected = {f"a{a} r{r} {i}" for a in (0, 1) for r in range(4) for i in range(lines_each)}
    assert len(seen) == len(expected) and {line.text for line in seen} == expected
    assert all(line.text.startswith(f"a{line.attempt} r{line.rank} ") for line in seen)
    cursor.close()
    _append(_logs(store, 1) / "rank-0.log", b"after close\n")
    assert list(cursor.poll().lines) == [LogLine(0, "after close", 1)]  # closed files reopen where they were


def test_a_poll_cut_by_its_budget_is_followed_by_one_that_starts_where_it_stopped(run: tuple[Store, str]) -> None:
    store, run_id = run
    for r in range(3):
        _append(_logs(store) / f"rank-{r}.log", f"r{r} first\n".encode() * 40)  # each file: more than a budget
    cursor = StoreCursor(store, run_id)
    read: list[int] = []
    for _ in range(3):
        _append(_logs(store) / "rank-0.log", b"r0 busy\n" * 40)  # rank 0 never stops writing
        read.extend(block.rank for block in cursor.poll(max_lines=1).lines.blocks)  # type: ignore[attr-defined]
    assert read == [0, 1, 2]  # rank 0 does not keep the others waiting


def test_skip_idle_reads_quiet_ranks_less_often_and_loses_nothing(run: tuple[Store, str]) -> None:
    store, run_id = run
    events = store.attempt_dir(run_id, 0) / "events"
    supervisor = EventWriter(events / "supervisor.jsonl", "supervisor")
    ranks = [EventWriter(events / f"rank-{r}.jsonl", f"rank-{r}", rank=r) for r in range(storecursor.IDLE_EVERY)]
    for r in range(storecursor.IDLE_EVERY):
        _append(_logs(store) / f"rank-{r}.log", b"start\n")
    cursor = StoreCursor(store, run_id)
    assert len(cursor.poll(skip_idle=True).lines) == storecursor.IDLE_EVERY  # nothing is idle yet: all read
    cursor.poll(skip_idle=True)  # every rank's files had nothing new: idle from now on
    got_lines: list[LogLine] = []
    got_events: list[tuple[str, int]] = []
    for step in range(storecursor.IDLE_EVERY):
        for r, writer in enumerate(ranks):
            _append(_logs(store) / f"rank-{r}.log", f"r{r} {step}\n".encode())
            writer.emit(EventKind.HEARTBEAT, step=step)
        supervisor.emit(EventKind.STATE, state="running", reason="")
        batch = cursor.poll(skip_idle=True)
        assert [e.source for e in batch.events].count("supervisor") == 1  # the supervisor is read every time
        rank_lines = [line for line in batch.lines]
        assert len({line.rank for line in rank_lines}) <= 1 + step  # idle ranks wait for their turn ...
        got_lines.extend(rank_lines)
        got_events.extend((e.source, e.seq) for e in batch.events if e.source != "supervisor")
    rest = cursor.poll()  # ... and a plain poll reads every file
    got_lines.extend(rest.lines)
    got_events.extend((e.source, e.seq) for e in rest.events)
    assert sorted(line.text for line in got_lines) == sorted(f"r{r} {s}" for r in range(storecursor.IDLE_EVERY)
                                                            for s in range(storecursor.IDLE_EVERY))
    assert sorted(got_events) == sorted((f"rank-{r}", s + 1) for r in range(storecursor.IDLE_EVERY)
                                        for s in range(storecursor.IDLE_EVERY))  # each once
    assert cursor.poll().lines == () and cursor.poll(skip_idle=True).events == ()


def test_cursors_share_one_budget_of_kept_descriptors(run: tuple[Store, str], monkeypatch: pytest.MonkeyPatch) -> None:
    store, run_id = run
    budget = _budget(3)
    monkeypatch.setattr(storecursor, "_KEPT_OPEN", budget)
    for rank in range(2):
        _append(_logs(store) / f"rank-{rank}.log", b"x\n")
    first, second = StoreCursor(store, run_id), StoreCursor(store, run_id)
    assert len(first.poll().lines) == 2 and budget._left == 1
    assert len(second.poll().lines) == 2 and budget._left == 0  # one kept, one opened at each read
    first.close()
    assert budget._left == 2
    del second  # a dropped cursor gives its descriptors back too
    assert budget._left == 3
    _append(_logs(store) / "rank-0.log", b"y\n")
    assert list(first.poll().lines) == [LogLine(0, "y")]  # a closed cursor still reads, reopening its files
