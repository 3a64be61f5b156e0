"""Every bad input gets a clear error, and nothing is submitted (no run in the store, no process)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError

from nbtrain.store import Store

BODY = "\nx = 1\nx + 1\n"


def _refused(run_cell: Any, line: str, body: str = BODY) -> str:
    with pytest.raises(UsageError) as caught:
        run_cell(f"%%distributed {line}{body}")
    assert Store().ids() == [], "a run was recorded although the cell was refused"
    return str(caught.value)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ("--nodes 0", "--nodes: 0 is out of range"),
        ("--gpus -1", "--gpus: -1 is out of range"),
        ("--strategy horovod", "--strategy: unknown value 'horovod'; choose one of: ddp, fsdp, deepspeed"),
        ("--device tpu", "--device: unknown value 'tpu'; choose one of: auto, gpu, cpu"),
        ("--mixed-precision fp4", "--mixed-precision: unknown value 'fp4'"),
        ("--nodes two", "argument --nodes: invalid int value: 'two'"),
        ("--env NOEQUALS", "--env 'NOEQUALS': write it as NAME=VALUE"),
        ("--out 1bad", "--out '1bad': not a valid Python variable name"),
    ],
)
def test_bad_flags(shell: Any, run_cell: Any, flags: str, expected: str) -> None:
    assert expected in _refused(run_cell, flags)


def test_more_gpus_than_exist(shell: Any, run_cell: Any) -> None:
    message = _refused(run_cell, "--device gpu --nodes 2 --gpus 64")
    assert "GPU" in message and "--backend kubernetes" in message


def test_syntax_error_uses_cell_line_numbers(shell: Any, run_cell: Any) -> None:
    message = _refused(run_cell, "--nodes 1", "\nx = 1\ny = (x +\nprint(y)\n")
    assert "cell line 3" in message


def test_undefined_name_is_named_with_its_line(shell: Any, run_cell: Any) -> None:
    message = _refused(run_cell, "", "\nx = 1\nprint(undefined_thing + x)\n")
    assert "undefined_thing" in message and "cell line 3" in message


def test_unpicklable_object_named_with_type(shell: Any, run_cell: Any) -> None:
    run_cell("import threading\nlock = threading.Lock()")
    message = _refused(run_cell, "", "\nwith lock:\n    pass\n")
    assert "lock" in message and "lock" in message.lower().split("lock", 1)[1]


def test_capture_over_size_cap(shell: Any, run_cell: Any) -> None:
    run_cell("import numpy as np\nbig = np.zeros(3_000_000)")
    message = _refused(run_cell, "--max-capture-mb 1", "\nbig.sum()\n")
    assert "big" in message and "--max-capture-mb" in message


def test_secret_from_environment_is_refused(shell: Any, run_cell: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", "s3cr3t-value-0123456789")
    run_cell("import os\nauth = 'Bearer ' + os.environ['MY_SERVICE_TOKEN']")
    message = _refused(run_cell, "", "\nprint(auth)\n")
    assert "MY_SERVICE_TOKEN" in message and "s3cr3t" not in message and "--allow-secrets" in message
    run_cell("%%distributed --dry-run --allow-secrets\nprint(auth)\n")  # explicitly allowed: plans fine


def test_magic_inside_cell_is_refused(shell: Any, run_cell: Any) -> None:
    message = _refused(run_cell, "", "\nx = 1\n!ls\n")
    assert "cell line 3" in message


def test_accelerate_missing(shell: Any, run_cell: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    monkeypatch.setenv("NBTRAIN_PYTHON", str(venv / "bin" / "python"))
    message = _refused(run_cell, "")
    assert "accelerate is not installed" in message and "pip install accelerate" in message


def test_no_free_port(shell: Any, run_cell: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv("NBTRAIN_PORT_RANGE", f"{port}-{port}")
        message = _refused(run_cell, "")
    assert f"no free TCP port on 127.0.0.1 in NBTRAIN_PORT_RANGE={port}-{port}" in message


def test_dry_run_shows_what_ships_and_submits_nothing(shell: Any, run_cell: Any, capsys: pytest.CaptureFixture[str]) -> None:
    run_cell("import numpy as np\nHIDDEN = 32\ndef build(h):\n    return np.ones(h)\narr = np.zeros((100, 100))")
    run_cell("%%distributed --dry-run --nodes 2 --gpus 2\nbuild(HIDDEN).sum() + arr.sum()\n")
    out = capsys.readouterr().out
    for name in ("HIDDEN", "build", "arr", "np"):
        assert name in out
    assert "--num_machines 2" in out and "--machine_rank 1" in out
    assert "not submitted" in out
    assert Store().ids() == []
