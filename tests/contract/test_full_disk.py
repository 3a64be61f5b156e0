"""A full disk under the run store is named: the run ends FAILED saying so, and nothing hangs."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import BackendUnderTest, kill_pids, run_processes, settle

from nbtrain.model import RunState
from nbtrain.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


def _unmount(path: Path) -> None:
    for _ in range(20):
        if subprocess.run(["umount", str(path)], capture_output=True).returncode == 0:
            return
        time.sleep(0.25)  # a process that held a file there may still be exiting
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.fixture
def small_disk(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A 16 MiB tmpfs as NBTRAIN_HOME; on teardown: no process of its runs may be left, and it is unmounted."""
    if os.geteuid() != 0:
        pytest.skip("mounting a 16 MiB tmpfs needs root")
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({(done.stderr or done.stdout).strip()})")
    monkeypatch.setenv("NBTRAIN_HOME", str(mount))
    try:
        yield mount
    finally:
        runs = mount / "runs"
        run_ids = {p.name for p in runs.iterdir()} if runs.is_dir() else set()
        left = settle(lambda: sorted({pid for r in run_ids for pid in run_processes(r)}), 5)
        kill_pids(left)
        _unmount(mount)
    assert not left, f"processes left behind by runs on the full disk: {left}"


# ~100 bytes a line, 200,000 lines a rank: 40 MB from two ranks onto a 16 MiB store
FLOOD_CELL = '''for i in range(200_000):
    print(f"{i:08d} " + "x" * 91)
'''


def test_a_full_disk_is_named_and_nothing_hangs(under_test: BackendUnderTest, small_disk: Path) -> None:
    subject = under_test.on_store(Store(small_disk))
    try:
        run = subject.submit(FLOOD_CELL, name="flood", procs_per_node=2)
        state = run.wait(timeout=90, raise_on_failure=False, progress=False)
        free = shutil.disk_usage(small_disk).free
        assert state is RunState.FAILED, (
            f"run {run.id} ended {state.value} though its store is full ({free} bytes free of 16 MiB; the ranks "
            f"printed 40 MB): the output it could not keep is lost without a word")
        failure = run.failure
        assert failure is not None
        said = " ".join(filter(None, [failure.reason, failure.message, failure.summary()]))
        assert "no space left on device" in said.lower(), said
        assert str(small_disk) in said, f"the failure does not name where the disk is full: {said}"
    finally:
        subject.close()
