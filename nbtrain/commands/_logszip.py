"""``nbtrain logs RUN --all -o logs.zip``: every rank's log of every attempt, the failure report, status and spec.

What goes in (the names inside the zip)::

    logs/attempt-<A>/rank-<R>.log   the output of each rank of each attempt
    failure.txt                      the failure report: its one-line summary, then the first failing rank's
                                     traceback or last lines (absent when the run did not fail)
    status.json                      the run's summary and detail (``nbtrain status --json``), spec secrets masked
    environment.json                 each rank's environment report (host, versions, device; packages per node)

Secret-looking ``--env`` values are ``***`` (nbtrain.secrets), as in every other output of nbtrain.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

__all__ = ["write_logs_zip"]


def _attempts(run: Any) -> list[int]:
    numbers = sorted({int(a["attempt"]) for a in run.record.attempts if "attempt" in a})
    return numbers or [0]


def failure_text(failure: Any) -> str:
    """The failure report as text: the summary line, the diagnosis, then the traceback or last lines."""
    lines = [failure.summary()]
    if failure.traceback:
        lines += ["", "Traceback of the first failing rank:", failure.traceback.rstrip()]
    elif failure.last_lines:
        lines += ["", "Last lines of the first failing rank:", *failure.last_lines]
    return "\n".join(lines) + "\n"


def write_logs_zip(run: Any, path: Path) -> list[str]:
    """Write the zip of ``run`` (see the module doc) to ``path`` atomically; the names written, in order."""
    from nbtrain.cli import _run_json

    names: list[str] = []
    tmp = path.with_name(path.name + ".partial")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        def put(name: str, text: str) -> None:
            archive.writestr(name, text)
            names.append(name)

        for attempt in _attempts(run):
            for rank in range(run.spec.world_size):
                text = run.logs(rank, attempt=attempt)
                put(f"logs/attempt-{attempt}/rank-{rank}.log", text + ("\n" if text and not text.endswith("\n") else ""))
        failure = run.failure
        if failure is not None:
            put("failure.txt", failure_text(failure))
        put("status.json", json.dumps(_run_json(run, metrics=True), indent=2, sort_keys=True, default=str) + "\n")
        environments = {str(e.rank): dict(e.data) for e in run.events()
                        if e.kind.value == "env" and e.rank is not None}
        put("environment.json", json.dumps(environments, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(path)
    return names
