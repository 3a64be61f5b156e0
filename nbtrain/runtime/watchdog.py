"""Process identity and the rank's supervisor watchdog (stdlib only: travels with the runtime).

A PID alone can be reused by an unrelated process; ``pid:start-time`` (field 22 of ``/proc/PID/stat``, in
clock ticks since boot) names one process for its whole life. The local backend gives every rank the
identity of its supervisor (``NBTRAIN_SUPERVISOR``); a rank whose supervisor is gone ends itself, so a
supervisor killed by the OOM killer never leaves a gang running that nobody watches.
"""

from __future__ import annotations

import os
import sys
import threading

__all__ = ["ENV_SUPERVISOR", "alive", "identity", "start_time", "watch_supervisor"]

ENV_SUPERVISOR = "NBTRAIN_SUPERVISOR"


def start_time(pid: int) -> str | None:
    """The start time of live process ``pid`` (None when it does not exist or is a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[-1].split()
    except OSError:
        return None
    if not fields or fields[0] in ("Z", "X") or len(fields) < 20:
        return None
    return fields[19]  # field 22 of stat, counted after "comm)"


def identity(pid: int | None = None) -> str:
    """``pid:start-time`` of ``pid`` (default: this process); ``pid:`` when it is gone."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{start_time(pid) or ''}"


def alive(ident: str) -> bool:
    """True while the process named by ``ident`` (from :func:`identity`) still runs (a reused PID is not it)."""
    pid_text, _, started = ident.partition(":")
    if not pid_text.isdigit():
        return False
    now = start_time(int(pid_text))
    return now is not None and (not started or now == started)


def watch_supervisor(rank: int, period_s: float = 1.0) -> None:
    """End this process when the supervisor named in ``NBTRAIN_SUPERVISOR`` is gone (a daemon thread)."""
    ident = os.environ.get(ENV_SUPERVISOR)
    if not ident:
        return

    def loop() -> None:
        stop = threading.Event()
        while not stop.wait(period_s):
            if not alive(ident):
                sys.stderr.write(f"[nbtrain] rank {rank}: the run's supervisor ({ident.split(':')[0]}) is gone; "
                                 "ending this rank so no orphaned gang keeps running\n")
                sys.stderr.flush()
                os._exit(143)

    threading.Thread(target=loop, name="nbtrain-supervisor-watch", daemon=True).start()
