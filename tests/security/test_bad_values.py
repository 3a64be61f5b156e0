"""Every bad value is refused before anything starts, with a message naming what to change.

Before: ``--timeout inf`` and ``--max-capture-mb inf`` were accepted and broke later with a raw
OverflowError (the Kubernetes deadline, the capture cap); ``--collective-timeout 1e300`` failed inside
every rank after start; ``--nodes 1024 --gpus 64`` on a 2-core machine was planned as a 65,536-process
CPU gang; a whitespace-only cell was submitted; a 60 MB literal was ``repr()``'d (several times its size
in memory) before the size cap refused it; an open file was pickled with its contents.
"""

from __future__ import annotations

import io
import math
import os
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from nbtrain import flags
from nbtrain.bundle import capture_cell
from nbtrain.errors import BundleTooLargeError, CaptureError, EnvironmentProblem, SpecError, UnpicklableError
from nbtrain.spec import JobSpec

# ------------------------------------------------------------------------------------------- numbers

NUMBER_FLAGS = [
    ("--timeout", "timeout_s", "2592000"),
    ("--collective-timeout", "collective_timeout_s", "86400"),
    ("--max-capture-mb", "max_capture_mb", "10240"),
    ("--stall-after", "stall_after_s", "86400"),
    ("--hang-timeout", "hang_timeout_s", "604800"),
    ("--warm-ttl", "warm_ttl_s", "604800"),  # before: never checked; NaN, inf, -5 and 1e300 were accepted
]


@pytest.mark.parametrize(("flag", "field", "highest"), NUMBER_FLAGS)
@pytest.mark.parametrize("text", ["inf", "-inf", "nan", "1e300", "0", "-5"])
def test_numbers_must_be_finite_and_in_range(flag: str, field: str, highest: str, text: str) -> None:
    with pytest.raises(SpecError) as caught:
        flags.spec_from_namespace(flags.build_parser("magic").parse_args([f"{flag}={text}"]))
    message = str(caught.value)
    assert message.startswith(f"{flag}:"), message
    assert str(float(text)) in message or text in message, message
    assert highest in message, message  # the allowed range is named
    with pytest.raises(SpecError):
        JobSpec(**{field: float(text)})


@pytest.mark.parametrize(("flag", "field", "highest"), NUMBER_FLAGS)
def test_the_largest_allowed_value_is_accepted(flag: str, field: str, highest: str) -> None:
    spec = flags.spec_from_namespace(flags.build_parser("cli").parse_args([flag, highest]))
    assert getattr(spec, field) == float(highest)


@pytest.mark.parametrize(("field", "value"), [("timeout_s", "60"), ("collective_timeout_s", True), ("max_capture_mb", None)])
def test_numbers_of_the_wrong_type_are_a_spec_error(field: str, value: Any) -> None:
    with pytest.raises(SpecError, match="expected a number"):
        JobSpec(**{field: value})


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "0", "-5"])
def test_validate_refuses_a_timeout_that_is_not_a_positive_finite_number(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: ``nbtrain validate --timeout nan`` (and ``inf``) passed the ``<= 0`` check and ran the ladder."""
    from nbtrain.cli import main

    assert main(["validate", str(tmp_path / "job"), f"--timeout={text}"]) != 0
    err = capsys.readouterr().err
    assert f"--timeout {float(text)}" in err and "positive, finite number of seconds" in err, err
    assert not (tmp_path / "job").exists()


def test_an_infinite_timeout_in_nbtrain_toml_names_its_key() -> None:
    with pytest.raises(flags.TomlError) as caught:
        flags.spec_from_toml({"job": {"timeout_s": math.inf}})
    assert (caught.value.table, caught.value.key) == ("job", "timeout_s")
    assert "--timeout: inf" in str(caught.value)


# ------------------------------------------------------------------------------------------- oversubscription


def _local_backend(tmp_path: Path) -> Any:
    from nbtrain.backends.local.backend import LocalBackend
    from nbtrain.backends.local.gpus import GpuInventory
    from nbtrain.store import Store

    return LocalBackend(Store(tmp_path / "home"), gpus=GpuInventory())  # a machine without GPUs


def test_a_cpu_gang_far_beyond_the_cores_is_refused_unless_forced(tmp_path: Path) -> None:
    backend = _local_backend(tmp_path)
    cores = os.cpu_count() or 1
    huge = JobSpec(nodes=1024, procs_per_node=64)
    with pytest.raises(EnvironmentProblem) as caught:
        backend.plan(huge, str(tmp_path), "0" * 64, "huge-000000")
    message = str(caught.value)
    assert "65536" in message and f"{cores} CPU core" in message and "--oversubscribe" in message, message
    just_over = JobSpec(nodes=1, procs_per_node=4 * cores + 1, device="cpu")
    with pytest.raises(EnvironmentProblem):
        backend.plan(just_over, str(tmp_path), "0" * 64, "over-000000")
    forced = backend.plan(just_over.with_changes(oversubscribe=True), str(tmp_path), "0" * 64, "over-000000")
    assert len(forced.request.launchers) == 1
    assert backend.plan(JobSpec(nodes=1, procs_per_node=4 * cores, device="cpu"), str(tmp_path), "0" * 64, "ok-000000")


def test_oversubscribe_is_a_flag_of_the_local_backend_only() -> None:
    spec = flags.spec_from_namespace(flags.build_parser("magic").parse_args(["--oversubscribe"]))
    assert spec.oversubscribe is True
    assert flags.spec_to_toml(spec)["job"]["oversubscribe"] is True
    (message,) = flags.unsupported_options(spec.with_changes(backend="kubernetes"), "kubernetes")
    assert message.startswith("--oversubscribe is an option of the local backend only")


# ------------------------------------------------------------------------------------------- the cell


@pytest.mark.parametrize("cell", ["", "   ", "\n\n\t  \n", "\r\n  \r\n"])
def test_a_blank_cell_is_refused(cell: str) -> None:
    with pytest.raises(CaptureError, match="no code"):
        capture_cell(cell, {"__name__": "__main__"})


def test_a_cell_of_only_comments_is_refused_too() -> None:
    with pytest.raises(CaptureError, match="no code"):
        capture_cell("# train here later\n", {"__name__": "__main__"})


SIZE = 60 * 1024 * 1024  # over the default 50 MB cap


@pytest.mark.parametrize("make", [lambda: b"\0" * SIZE, lambda: "\0" * SIZE, lambda: bytearray(SIZE)],
                         ids=["bytes", "str", "bytearray"])
def test_a_huge_literal_is_refused_without_copying_it(make: Any) -> None:
    big = make()
    tracemalloc.start()
    try:
        with pytest.raises(BundleTooLargeError) as caught:
            capture_cell("print(len(BIG))\n", {"__name__": "__main__", "BIG": big})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "BIG" in str(caught.value) and "--max-capture-mb" in str(caught.value)
    assert peak < SIZE // 4, f"capturing a {SIZE} byte value allocated {peak} bytes at peak"


def test_a_literal_just_under_the_cap_still_ships() -> None:
    bundle = capture_cell("print(len(BLOB))\n", {"__name__": "__main__", "BLOB": b"x" * 100_000})
    assert "objects.pkl" in bundle.files  # too long for a literal: pickled, under the cap


@pytest.mark.parametrize("mode", ["r", "rb", "w", "a+b"])
def test_an_open_file_is_refused_naming_the_variable_and_its_type(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "data.txt"
    path.write_text("row 1: private data\n")
    with open(path, mode) as handle:
        with pytest.raises(UnpicklableError) as caught:
            capture_cell("print(handle)\n", {"__name__": "__main__", "handle": handle})
    message = str(caught.value)
    assert "'handle'" in message and type(handle).__name__ in message and "open file" in message, message
    assert "private data" not in message


def test_an_open_file_inside_another_object_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_text("secret rows\n")
    with open(path) as handle:
        with pytest.raises(UnpicklableError) as caught:
            capture_cell("print(cfg)\n", {"__name__": "__main__", "cfg": {"log": handle, "lr": object()}})
    assert "'cfg'" in str(caught.value) and "TextIOWrapper" in str(caught.value)


def test_in_memory_buffers_still_ship() -> None:
    bundle = capture_cell("print(buf.getvalue(), raw.getvalue())\n",
                          {"__name__": "__main__", "buf": io.StringIO("text"), "raw": io.BytesIO(b"bytes")})
    assert "objects.pkl" in bundle.files
