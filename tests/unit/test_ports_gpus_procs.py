"""The local machine's parts: rendezvous ports, the GPU inventory and finding/ending a gang's processes."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nbtrain.backends.local.gpus import GpuInventory, detect_gpus
from nbtrain.backends.local.ports import free_port
from nbtrain.backends.local.procs import MARKER, gang_pids, terminate_gang
from nbtrain.errors import EnvironmentProblem

# -- ports -----------------------------------------------------------------------------------------


@pytest.fixture
def listening() -> Iterator[int]:
    """A port on 127.0.0.1 that something is listening on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_free_port_can_be_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NBTRAIN_PORT_RANGE", raising=False)
    port = free_port()
    assert 1024 <= port <= 65535
    assert _bindable(port)


def test_free_port_stays_in_the_configured_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NBTRAIN_PORT_RANGE", raising=False)
    port = free_port()  # free now (just released by the OS)
    monkeypatch.setenv("NBTRAIN_PORT_RANGE", f"{port}-{port}")
    assert free_port() == port
    monkeypatch.setenv("NBTRAIN_PORT_RANGE", str(port))  # a single port is a range too
    assert free_port() == port


def test_a_range_whose_only_port_is_taken_names_the_range(monkeypatch: pytest.MonkeyPatch, listening: int) -> None:
    monkeypatch.setenv("NBTRAIN_PORT_RANGE", f"{listening}-{listening}")
    with pytest.raises(EnvironmentProblem) as info:
        free_port()
    assert f"NBTRAIN_PORT_RANGE={listening}-{listening}" in str(info.value)
    assert "widen the range" in str(info.value)


def test_a_taken_port_is_skipped(monkeypatch: pytest.MonkeyPatch, listening: int) -> None:
    if not _bindable(listening + 1) or listening + 1 > 65535:
        pytest.skip("the port after the listening one is busy on this machine")
    monkeypatch.setenv("NBTRAIN_PORT_RANGE", f"{listening}-{listening + 1}")
    assert free_port() == listening + 1


@pytest.mark.parametrize("value", ["abc", "29500-x", "29500-29600-29700", "low-high", "-"])
def test_a_malformed_range_is_an_environment_problem(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("NBTRAIN_PORT_RANGE", value)
    with pytest.raises(EnvironmentProblem, match="LOW-HIGH"):
        free_port()


@pytest.mark.parametrize("value", ["70000-70001", "0-0"])
def test_a_range_outside_tcp_ports_is_an_environment_problem(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("NBTRAIN_PORT_RANGE", value)
    with pytest.raises(EnvironmentProblem):
        free_port()


# -- GPU inventory (a fake nvidia-smi: a real program on PATH) --------------------------------------


def _fake_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "nvidia-smi"
    program.write_text("#!/bin/sh\n" + script)
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(bin_dir))


FOUR_GPUS = """\
printf '0, GPU-aaaa0000, NVIDIA H100 80GB HBM3\\n1, GPU-bbbb1111, NVIDIA H100 80GB HBM3\\n2, GPU-cccc2222, NVIDIA H100 80GB HBM3\\n3, GPU-dddd3333, NVIDIA H100 80GB HBM3\\n'
"""


def test_detect_gpus_reads_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nvidia_smi(tmp_path, monkeypatch, FOUR_GPUS)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    inventory = detect_gpus()
    assert inventory.ids == ("0", "1", "2", "3")
    assert inventory.names == ("NVIDIA H100 80GB HBM3",) * 4
    assert inventory.count == 4


def test_detect_gpus_honours_cuda_visible_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nvidia_smi(tmp_path, monkeypatch, FOUR_GPUS)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    assert detect_gpus().ids == ("1", "3")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert detect_gpus().count == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert detect_gpus().count == 0


def test_cuda_visible_devices_by_uuid_keeps_its_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nvidia_smi(tmp_path, monkeypatch, FOUR_GPUS)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-dddd3333,GPU-bbbb")
    assert detect_gpus().ids == ("3", "1")


def test_no_nvidia_smi_means_no_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect_gpus() == GpuInventory()


def test_a_failing_nvidia_smi_means_no_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nvidia_smi(tmp_path, monkeypatch, "echo 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    assert detect_gpus().count == 0


# -- gang processes ---------------------------------------------------------------------------------


def _start(argv: list[str], run_id: str, **kwargs: object) -> subprocess.Popen[bytes]:
    env = {**os.environ, MARKER: run_id}
    return subprocess.Popen(argv, env=env, **kwargs)  # type: ignore[call-overload, no-any-return]


def _wait_for(run_id: str, pid: int, timeout: float = 5.0) -> list[int]:
    """gang_pids once the child has exec'd (before that /proc shows the parent's environment)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = gang_pids(run_id)
        if pid in found:
            return found
        time.sleep(0.02)
    return gang_pids(run_id)


def _cleanup(*children: subprocess.Popen[bytes]) -> None:
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=5)


def test_gang_pids_finds_exactly_the_processes_of_one_run() -> None:
    run_id = f"t-{uuid.uuid4().hex[:10]}"
    ours = _start(["sleep", "30"], run_id)
    longer = _start(["sleep", "30"], run_id + "1")  # our id is a prefix of its id
    shorter = _start(["sleep", "30"], run_id[:-1])  # its id is a prefix of ours
    other = _start(["sleep", "30"], f"t-{uuid.uuid4().hex[:10]}")
    try:
        assert _wait_for(run_id, ours.pid) == [ours.pid]
        assert _wait_for(run_id + "1", longer.pid) == [longer.pid]
        assert _wait_for(run_id[:-1], shorter.pid) == [shorter.pid]
        assert gang_pids(run_id, exclude=(ours.pid,)) == []
    finally:
        _cleanup(ours, longer, shorter, other)


def test_terminate_gang_ends_the_gang_and_spares_others() -> None:
    run_id = f"t-{uuid.uuid4().hex[:10]}"
    ours = _start(["sleep", "30"], run_id)
    bystander = _start(["sleep", "30"], run_id + "-other")
    try:
        assert _wait_for(run_id, ours.pid) == [ours.pid]
        started = time.monotonic()
        assert terminate_gang(run_id, grace_s=3.0) == 0  # SIGTERM was enough
        assert time.monotonic() - started < 3.0
        assert ours.wait(timeout=5) == -signal.SIGTERM
        assert bystander.poll() is None
        assert gang_pids(run_id) == []
    finally:
        _cleanup(ours, bystander)


def test_a_process_ignoring_sigterm_is_sigkilled_in_bounded_time() -> None:
    run_id = f"t-{uuid.uuid4().hex[:10]}"
    stubborn = _start(
        [sys.executable, "-c",
         "import signal, time\n"
         "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
         "print('ready', flush=True)\n"
         "time.sleep(30)\n"],
        run_id,
        stdout=subprocess.PIPE,
    )
    try:
        assert stubborn.stdout is not None
        assert stubborn.stdout.readline() == b"ready\n"  # SIGTERM is ignored from here on
        grace = 0.5
        started = time.monotonic()
        killed = terminate_gang(run_id, grace_s=grace)
        elapsed = time.monotonic() - started
        assert killed >= 1
        assert elapsed < grace + 2.0
        assert stubborn.wait(timeout=5) == -signal.SIGKILL
    finally:
        _cleanup(stubborn)


def test_terminate_gang_with_nothing_running_returns_at_once() -> None:
    started = time.monotonic()
    assert terminate_gang(f"t-{uuid.uuid4().hex[:10]}", grace_s=5.0) == 0
    assert time.monotonic() - started < 2.0
