"""The one flock helper: blocking, non-blocking and long-held forms exclude each other; a dead holder frees it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from nbtrain.filelock import FileLock, is_locked, locked, try_locked


def test_a_held_lock_refuses_a_second_holder_and_is_free_after(tmp_path: Path) -> None:
    path = tmp_path / "claim.lock"
    with try_locked(path) as first:
        assert first
        assert is_locked(path)
        with try_locked(path) as second:
            assert not second
        assert FileLock(path).acquire(blocking=False, wait_s=0.2) is False
    assert not is_locked(path)
    with locked(path):
        assert is_locked(path)
    assert (path.stat().st_mode & 0o777) == 0o600


def test_the_long_held_form_carries_the_holders_pid(tmp_path: Path) -> None:
    lock = FileLock(tmp_path / "agent.lock")
    assert lock.acquire(blocking=False)
    lock.write(str(os.getpid()))
    assert (tmp_path / "agent.lock").read_text() == str(os.getpid())
    lock.release()
    lock.release()  # idempotent
    assert not lock.held and not is_locked(tmp_path / "agent.lock")


def test_the_kernel_frees_the_lock_of_a_holder_that_died(tmp_path: Path) -> None:
    path = tmp_path / "mirror.lock"
    code = ("import sys,time; from nbtrain.filelock import FileLock; l=FileLock(sys.argv[1]); l.acquire(); "
            "print('held', flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        assert is_locked(path)
    finally:
        child.kill()
        child.wait(timeout=10)
    with try_locked(path, wait_s=5) as mine:
        assert mine
    assert not is_locked(tmp_path / "missing.lock")
