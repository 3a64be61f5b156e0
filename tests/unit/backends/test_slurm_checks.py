"""The doctor's store probe, read (pure): which nodes saw the probe file, and the Python, from the step's output."""

from __future__ import annotations

from nbtrain.backends.slurm.checks import parse_probe


def test_a_node_that_read_the_token_sees_the_store() -> None:
    out = "n1 abc123\nn1 python:yes\nn2 abc123\nn2 python:yes\n"
    assert parse_probe(out, "abc123", "/venv/bin/python") == (["n1", "n2"], [], [])


def test_a_node_without_the_file_is_named_and_so_is_a_node_without_python() -> None:
    out = "n1 abc123\nn1 python:yes\nn2 -\nn2 python:no\nsrun: some warning line\n"
    assert parse_probe(out, "abc123", "/venv/bin/python") == (["n1"], ["n2"], ["n2"])


def test_a_stale_token_does_not_count_as_shared() -> None:
    assert parse_probe("n1 0000\n", "abc123", "py") == ([], ["n1"], [])
