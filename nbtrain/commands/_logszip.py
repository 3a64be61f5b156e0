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
import os
import zipfile
from pathlib import Path
from typing import Any

__all__ = ["write_logs_zip"]


def _attempts(run: Any) -> list[int]:
    """Every attempt of ``run``: those the record lists (first submit, resumes) and those that only have a
    directory in the store (automatic restarts are not listed in the record)."""
    from nbtrain.backends.storecursor import attempt_numbers

    numbers = {int(a["attempt"]) for a in run.record.attempts if "attempt" in a}
    numbers.update(attempt_numbers(run.store, run.id))
    return sorted(numbers) or [0]


def failure_text(failure: Any) -> str:
    """The failure report as text: the summary line, the diagnosis, then the traceback or last lines."""
    lines = [failure.summary()]
    if failure.traceback:
        lines += ["", "Traceback of the first failing rank:", failure.traceback.rstrip()]
    elif failure.last_lines:
        lines += ["", "Last lines of the first failing rank:", *failure.last_lines]
    return "\n".join(lines) + "\n"


def write_logs_zip(run: Any, path: Path) -> list[str]:
    """Write the zip of ``run`` (see the module doc) to ``path`` atomically, readable by its owner only; the names
    written, in order. Nothing is left behind when writing fails."""
    names: list[str] = []
    tmp = path.with_name(path.name + ".partial")
    tmp.unlink(missing_ok=True)  # a leftover of an interrupted write
    # private, as the store it copies from: the logs hold whatever the training code printed
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            _write(run, handle, names)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return names


def _write(run: Any, handle: Any, names: list[str]) -> None:
    from nbtrain.runjson import run_detail

    with zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_DEFLATED) as archive:
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
        put("status.json", json.dumps(run_detail(run), indent=2, sort_keys=True, default=str) + "\n")
        environments = {str(e.rank): dict(e.data) for e in run.events()
                        if e.kind.value == "env" and e.rank is not None}
        put("environment.json", json.dumps(environments, indent=2, sort_keys=True, default=str) + "\n")
