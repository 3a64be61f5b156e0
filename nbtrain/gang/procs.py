"""Find and end every process of a gang (Linux ``/proc``).

Killing a launcher leaves its workers alive (torchelastic starts them in their own session), so the
gang is identified by a marker every process inherits: ``NBTRAIN_RUN_ID=<id>`` in its environment.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

__all__ = ["MARKER", "gang_pids", "pid_gone", "pids_with_env", "terminate_gang"]

MARKER = "NBTRAIN_RUN_ID"


def pids_with_env(name: str, value: str, *, exclude: tuple[int, ...] = ()) -> list[int]:
    """PIDs of live (non-zombie) processes whose environment (as exec'd) carries ``name=value``."""
    needle = b"\0" + f"{name}={value}".encode() + b"\0"
    own = {os.getpid(), *exclude}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid in own:
            continue
        try:
            environ = (entry / "environ").read_bytes()
            if needle not in b"\0" + environ + b"\0":
                continue
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state = stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else "?"
        if state not in ("Z", "X"):
            found.append(pid)
    return found


def gang_pids(run_id: str, *, exclude: tuple[int, ...] = ()) -> list[int]:
    """PIDs of live (non-zombie) processes whose environment carries ``NBTRAIN_RUN_ID=run_id``."""
    return pids_with_env(MARKER, run_id, exclude=exclude)


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def terminate_gang(run_id: str, *, grace_s: float = 3.0, exclude: tuple[int, ...] = (), groups: tuple[int, ...] = ()) -> int:
    """SIGTERM the gang (and process ``groups``), wait up to ``grace_s``, SIGKILL survivors.

    Returns how many processes had to be SIGKILLed. Bounded: returns within ``grace_s + 2`` seconds.
    """
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    _signal_all(gang_pids(run_id, exclude=exclude), signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not gang_pids(run_id, exclude=exclude):
            return 0
        time.sleep(0.1)
    killed = 0
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        survivors = gang_pids(run_id, exclude=exclude)
        if not survivors:
            break
        killed += len(survivors)
        for pgid in groups:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _signal_all(survivors, signal.SIGKILL)
        time.sleep(0.1)
    return killed


def pid_gone(pid: int) -> tuple[bool, int | None]:
    """(gone, exit_code): gone when the process no longer runs; exit code read from a zombie if possible."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True, None
    fields = stat.rsplit(")", 1)[-1].split()
    if fields and fields[0] in ("Z", "X"):
        code = None
        if len(fields) >= 50:  # field 52 of stat (exit_code, waitpid format), counted after "comm)"
            status = int(fields[-1])
            code = -(status & 0x7F) if status & 0x7F else (status >> 8) & 0xFF
        return True, code
    return False, None
