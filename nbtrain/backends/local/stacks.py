"""Ask stalled ranks on this machine for the stacks of all their threads (``nbtrain.runtime.progress``).

Each rank registers faulthandler on ``SIGUSR2`` at start-up and says so in its RANK_START event (with its PID
and host). faulthandler's handler is C, so the dump is written even when the rank's main thread holds the GIL in
a C call and no Python thread of it can run. The supervisor writes the header the triage looks for into the
rank's log (the dump itself cannot carry one), then sends the signal; the rank appends its stacks below it.

faulthandler writes frames as ``File "…/main.py", line 12 in <module>``: no source text, and main.py's own line
numbers. :func:`collect` reads them as a failure traceback reads: each frame with its source line, and a frame
in the cell's part of a bundle's main.py with ``[cell line N]`` (the manifest beside it has the line map).
"""

from __future__ import annotations

import json
import linecache
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbtrain.bundle.reader import MANIFEST_NAME, cell_line
from nbtrain.runtime import watchdog
from nbtrain.runtime.progress import STACKS_HEADER

__all__ = ["Listener", "annotate", "collect", "listener", "render", "request_stacks"]

_FRAME = re.compile(r'^(?P<indent>\s*)File "(?P<path>[^"]+)", line (?P<line>\d+) in .*$')


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
    return {r: annotate(dump) for r, dump in found.items() if dump}


def annotate(dump: str) -> str:
    """``dump`` (faulthandler's frames) with the source line under each frame whose file is readable here, and
    ``[cell line N]`` on each frame in the cell's part of a bundle's main.py (as failure tracebacks show them)."""
    manifests: dict[Path, Any] = {}
    out = []
    for text in dump.splitlines():
        match = _FRAME.match(text)
        if match is None:
            out.append(text)
            continue
        path, number = Path(match["path"]), int(match["line"])
        if path.parent not in manifests:
            manifests[path.parent] = _manifest(path)
        manifest = manifests[path.parent]
        where = cell_line(manifest, number) if manifest else None
        out.append(text + (f"  [cell line {where}]" if where is not None else ""))
        source = linecache.getline(str(path), number).strip()
        if source:
            out.append(f"{match['indent']}    {source}")
    return "\n".join(out)


def _manifest(path: Path) -> Any:
    """The manifest of the bundle whose entry file ``path`` is, else None (another file, or not readable)."""
    try:
        manifest = json.loads((path.parent / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    entry = manifest.get("entry", "main.py") if isinstance(manifest, dict) else None
    return manifest if entry == path.name else None


def render(dumps: dict[int, str]) -> str:
    """``rank N:`` and its dump, for each rank in order (what the triage and the stall detail show)."""
    return "\n".join(f"rank {r}:\n{dump}" for r, dump in sorted(dumps.items()))
