"""Paged log reads (nbtrain/logpage.py) against a naive slice of the same lines."""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbtrain import logpage
from nbtrain.logpage import clear_index_cache, read_page
from nbtrain.model import LogPage


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    clear_index_cache()
    yield
    clear_index_cache()


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of a few bytes, so that small files cross many block and index boundaries."""
    monkeypatch.setattr(logpage, "SCAN_BLOCK", 64)
    monkeypatch.setattr(logpage, "BACK_BLOCK", 16)
    monkeypatch.setattr(logpage, "INDEX_EVERY", 24)


def write(path: Path, lines: list[str], *, end: str = "\n") -> Path:
    path.write_bytes("".join(line + end for line in lines).encode())
    return path


def naive(lines: list[str], start: int, limit: int) -> tuple[list[str], int]:
    first = max(0, len(lines) + start) if start < 0 else start
    return lines[first:first + limit], first


LINES = [f"line {i:04d} " + "x" * (i % 37) for i in range(500)]


def test_first_middle_and_last_pages(tmp_path: Path, small_blocks: None) -> None:
    log = write(tmp_path / "rank-0.log", LINES)
    assert read_page(log, 0, 10) == LogPage(tuple(LINES[:10]), 0, 500)
    assert read_page(log, 250, 7) == LogPage(tuple(LINES[250:257]), 250, 500)
    assert read_page(log, 495, 10) == LogPage(tuple(LINES[495:]), 495, 500)
    assert read_page(log, 250, 7).end == 257


def test_pages_across_index_boundaries_cover_the_file_exactly_once(tmp_path: Path, small_blocks: None) -> None:
    log = write(tmp_path / "rank-0.log", LINES)
    seen: list[str] = []
    start = 0
    while True:
        page = read_page(log, start, 13)
        seen.extend(page.lines)
        if not page.lines:
            break
        start = page.end
    assert seen == LINES
    index = logpage._CACHE[os.fspath(log)]
    assert len(index.line_at) > 10  # the file really crossed many index entries


def test_negative_starts_count_from_the_end(tmp_path: Path, small_blocks: None) -> None:
    log = write(tmp_path / "rank-0.log", LINES)
    assert read_page(log, -1, 1) == LogPage((LINES[-1],), 499, 500)
    assert read_page(log, -100, 100).lines == tuple(LINES[-100:])
    assert read_page(log, -100, 10) == LogPage(tuple(LINES[400:410]), 400, 500)
    assert read_page(log, -1000, 3) == LogPage(tuple(LINES[:3]), 0, 500)  # clamped to the first line


def test_tail_of_a_large_unindexed_log_has_no_total(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     small_blocks: None) -> None:
    monkeypatch.setattr(logpage, "TAIL_INDEX_MAX", 100)  # "large": counting it would cost a scan
    log = write(tmp_path / "rank-0.log", LINES)
    assert read_page(log, -100, 100) == LogPage(tuple(LINES[-100:]), -100, None)
    assert read_page(log, -3, 2) == LogPage(tuple(LINES[-3:-1]), -3, None)
    assert read_page(log, -10_000, 2) == LogPage(tuple(LINES[:2]), 0, 500)  # walked to the start: counted
    assert os.fspath(log) not in logpage._CACHE  # no scan was started for a tail
    read_page(log, 0, 1)  # a read by line number indexes the file ...
    assert read_page(log, -100, 100) == LogPage(tuple(LINES[-100:]), 400, 500)  # ... then tails are absolute


def test_past_the_end_and_limit_zero(tmp_path: Path) -> None:
    log = write(tmp_path / "rank-0.log", LINES[:5])
    assert read_page(log, 5, 10) == LogPage((), 5, 5)
    assert read_page(log, 99, 10) == LogPage((), 99, 5)
    assert read_page(log, 2, 0) == LogPage((), 2, 5)
    assert read_page(log, -2, 0) == LogPage((), 3, 5)
    with pytest.raises(ValueError, match="limit must be >= 0"):
        read_page(log, 0, -1)


def test_missing_and_empty_files(tmp_path: Path) -> None:
    assert read_page(tmp_path / "nope.log", 0, 10) == LogPage((), 0, 0)
    assert read_page(tmp_path / "nope.log", -10, 10) == LogPage((), 0, 0)
    empty = write(tmp_path / "empty.log", [])
    assert read_page(empty, 0, 10) == LogPage((), 0, 0)
    assert read_page(empty, -1, 1) == LogPage((), 0, 0)


def test_an_unterminated_last_line_is_not_returned_until_complete(tmp_path: Path, small_blocks: None) -> None:
    log = tmp_path / "rank-0.log"
    log.write_bytes(b"one\ntwo\nthr")
    assert read_page(log, 0, 10) == LogPage(("one", "two"), 0, 2)
    assert read_page(log, -1, 1) == LogPage(("two",), 1, 2)
    clear_index_cache()
    assert read_page(log, -1, 1) == LogPage(("two",), 1, 2)  # same from a backward walk
    with open(log, "ab") as f:
        f.write(b"ee\n")
    assert read_page(log, 2, 10) == LogPage(("three",), 2, 3)
    only_partial = tmp_path / "partial.log"
    only_partial.write_bytes(b"no newline yet")
    assert read_page(only_partial, 0, 5) == LogPage((), 0, 0)
    assert read_page(only_partial, -5, 5) == LogPage((), 0, 0)


def test_crlf_blank_lines_and_invalid_utf8(tmp_path: Path, small_blocks: None) -> None:
    log = tmp_path / "rank-0.log"
    log.write_bytes(b"windows\r\n\r\n\ncaf\xc3\xa9 \xff\xfe bad\nkeeps\rinner\r\r\n")
    expected = ("windows", "", "", "caf\u00e9 \ufffd\ufffd bad", "keeps\rinner\r")
    assert read_page(log, 0, 10) == LogPage(expected, 0, 5)
    clear_index_cache()
    assert read_page(log, -10, 10) == LogPage(expected, 0, 5)


def test_growing_file_pages_forward_without_gaps_or_duplicates(tmp_path: Path, small_blocks: None) -> None:
    log = tmp_path / "rank-0.log"
    log.write_bytes(b"")
    written: list[str] = []
    seen: list[str] = []
    start = 0
    for round_ in range(60):
        with open(log, "ab") as f:  # append some lines and half of the next one
            new = [f"r{round_} l{i} " + "y" * (i * 7 % 23) for i in range(round_ % 7)]
            written.extend(new)
            f.write("".join(x + "\n" for x in new).encode())
        page = read_page(log, start, 3)
        assert page.total == len(written)
        seen.extend(page.lines)
        start = page.end
    while (page := read_page(log, start, 3)).lines:
        seen.extend(page.lines)
        start = page.end
    assert seen == written
    index = logpage._CACHE[os.fspath(log)]
    assert index.lines == len(written) and len(index.line_at) > 5  # extended, not rebuilt


def test_half_written_lines_while_paging(tmp_path: Path, small_blocks: None) -> None:
    log = tmp_path / "rank-0.log"
    log.write_bytes(b"a\nb")
    assert read_page(log, 0, 10).lines == ("a",)
    with open(log, "ab") as f:
        f.write(b"ravo\nc")
    page = read_page(log, 1, 10)
    assert page == LogPage(("bravo",), 1, 2)


def test_truncated_or_replaced_file_is_indexed_again(tmp_path: Path, small_blocks: None) -> None:
    log = write(tmp_path / "rank-0.log", LINES)
    assert read_page(log, 400, 2).lines == tuple(LINES[400:402])
    write(log, ["short", "file"])  # truncated in place: smaller
    assert read_page(log, 0, 10) == LogPage(("short", "file"), 0, 2)
    replacement = write(tmp_path / "new.log", [f"new {i}" for i in range(300)])
    os.replace(replacement, log)  # another inode, larger
    assert read_page(log, 250, 2) == LogPage(("new 250", "new 251"), 250, 300)
    assert read_page(log, -1, 1) == LogPage(("new 299",), 299, 300)
    # rewritten in place, larger, same inode: the newline where the index ended is gone
    log.write_bytes(b"".join(b"z" * 9 + b"\n" for _ in range(10)) + b"q" * 5000 + b"\n")
    assert read_page(log, 0, 20).total == 11


def test_cache_is_bounded(tmp_path: Path) -> None:
    for i in range(logpage.CACHED_FILES + 10):
        read_page(write(tmp_path / f"rank-{i}.log", ["x"]), 0, 1)
    assert len(logpage._CACHE) == logpage.CACHED_FILES


def test_memory_is_the_page_plus_a_block(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    block = b"".join(b"[rank0]: step %06d loss=0.1234 " % i + b"w" * 60 + b"\n" for i in range(10_000))
    with open(log, "wb") as f:
        for _ in range(20):  # ~20 MB
            f.write(block)
    tracemalloc.start()
    try:
        for start in (-100, 100_000, 199_900):
            tracemalloc.reset_peak()
            page = read_page(log, start, 100)
            assert len(page.lines) == 100
            assert tracemalloc.get_traced_memory()[1] < 4 * logpage.SCAN_BLOCK
    finally:
        tracemalloc.stop()


@st.composite
def logs_and_reads(draw: st.DrawFn) -> tuple[list[str], bool, list[tuple[int, int]]]:
    alphabet = st.sampled_from(["a", "b", " ", "\u00e9", "\r", "\t"])
    lines = draw(st.lists(st.text(alphabet, max_size=30), max_size=80))
    lines = [line.rstrip("\r") for line in lines]  # a trailing \r is stripped by contract
    partial = draw(st.booleans())
    reads = draw(st.lists(st.tuples(st.integers(-120, 120), st.integers(0, 120)), min_size=1, max_size=8))
    return lines, partial, reads


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=logs_and_reads(), small=st.booleans(), huge_tail=st.booleans())
def test_pages_equal_a_list_slice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: tuple[list[str], bool,
                                  list[tuple[int, int]]], small: bool, huge_tail: bool) -> None:
    lines, partial, reads = case
    clear_index_cache()
    monkeypatch.setattr(logpage, "SCAN_BLOCK", 32 if small else 1 << 20)
    monkeypatch.setattr(logpage, "BACK_BLOCK", 8 if small else 64 << 10)
    monkeypatch.setattr(logpage, "INDEX_EVERY", 12 if small else 64 << 10)
    monkeypatch.setattr(logpage, "TAIL_INDEX_MAX", 0 if huge_tail else 16 << 20)
    log = tmp_path / "prop.log"
    log.write_bytes("".join(x + "\n" for x in lines).encode() + (b"unfinished" if partial else b""))
    for start, limit in reads:
        page = read_page(log, start, limit)
        expected, first = naive(lines, start, limit)
        assert list(page.lines) == expected
        if page.total is None:
            assert start < 0 and page.start == start and len(lines) >= -start
        else:
            assert (page.start, page.total) == (first, len(lines))
