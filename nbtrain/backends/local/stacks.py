"""Ask stalled ranks on this machine for the stacks of all their threads (``nbtrain.runtime.progress``).

Each rank registers faulthandler on ``SIGUSR2`` at start-up and says so in its RANK_START event (with its PID
and host). faulthandler's handler is C, so the dump is written even when the rank's main thread holds the GIL in
a C call and no Python thread of it can run. The supervisor writes the header the triage looks for into the
rank's log (the dump itself cannot carry one), then sends the signal; the rank appends its stacks below it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from nbtrain.runtime import watchdog
from nbtrain.runtime.progress import STACKS_HEADER

__all__ = ["Listener", "collect", "listener", "render", "request_stacks"]


@dataclass(frozen=True)
class Listener:
    """A rank that dumps its stacks on ``signum``: its PID on this machine, and ``pid:start-time`` when it said
    (:func:`nbtrain.runtime.watchdog.identity`), so a PID reused by another process after the rank ended is not
    signalled (SIGUSR2's default action would end that process)."""

    pid: int
    signum: int
    process: str | None = None


def listener(data: dict[str, object]) -> Listener | None:
    """The listener a RANK_START event's ``data`` describes; None when the rank does not listen or runs elsewhere
    (a PID on another host names some other process here)."""
    pid, signum, host = data.get("pid"), data.get("stacks_signal"), data.get("host")
    if not isinstance(pid, int) or not isinstance(signum, int) or pid <= 0 or host != socket.gethostname():
        return None
    process = data.get("process")
    return Listener(pid, signum, process if isinstance(process, str) and process.startswith(f"{pid}:") else None)


def request_stacks(log: Path, rank: int, who: Listener, why: str) -> bool:
    """Write the dump's header into ``log`` and signal the rank; False when it is gone (nothing is written then)."""
    if who.process is not None:
        if not watchdog.alive(who.process):
            return False
    else:
        try:
            os.kill(who.pid, 0)
        except OSError:
            return False
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(f"{STACKS_HEADER} {rank} ({why}; asked by the supervisor):\n")
    try:
        os.kill(who.pid, who.signum)
    except OSError:
        return False
    return True


def collect(logs_dir: Path, ranks: tuple[int, ...] | list[int], *, lines: int = 400) -> dict[int, str]:
    """The last stack dump in the log of each of ``ranks`` that has one (``rank -> dump``)."""
    from nbtrain.backends import triage
    from nbtrain.backends.storecursor import tail_lines

    found = {r: triage.stack_dump(tail_lines(logs_dir / f"rank-{r}.log", lines)) for r in ranks}
    return {r: dump for r, dump in found.items() if dump}


def render(dumps: dict[int, str]) -> str:
    """``rank N:`` and its dump, for each rank in order (what the triage and the stall detail show)."""
    return "\n".join(f"rank {r}:\n{dump}" for r, dump in sorted(dumps.items()))
