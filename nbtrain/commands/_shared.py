"""What the ``nbtrain`` commands share, in :mod:`nbtrain.cli` and in this package: the exit codes, JSON output and
how a command that started a run (submit, resume, debug) ends (:func:`finish`).

It imports nothing of :mod:`nbtrain.cli`, so command modules never import the module that registers them.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from nbtrain.errors import NbtrainError
from nbtrain.runjson import run_detail, run_summary

__all__ = [
    "EXIT_CANCELLED", "EXIT_CODES", "EXIT_ENVIRONMENT", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE",
    "NotAvailable", "finish", "print_json",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_CANCELLED, EXIT_ENVIRONMENT, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
#: Exit codes, for the help text and the docs.
EXIT_CODES = {
    EXIT_OK: "success (submit --wait: the run succeeded)",
    EXIT_FAILED: "the run failed (submit --wait), or doctor found a problem",
    EXIT_USAGE: "bad input: flags, directory, nbtrain.toml, notebook, unknown run; or not available",
    EXIT_CANCELLED: "the run was cancelled (submit --wait)",
    EXIT_ENVIRONMENT: "this machine or the backend cannot do it (accelerate missing, no GPU, no access)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C); a run being waited for is cancelled (a --warm run goes on)",
}


class NotAvailable(NbtrainError):
    """A command this installation cannot do yet (exit code 2)."""


def print_json(data: Any) -> None:
    """``data`` as one indented JSON document on stdout (keys sorted; what JSON lacks as text)."""
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def finish(run: Any, args: argparse.Namespace) -> int:
    """After submit/resume/debug: print the run (``--json``) or wait for it (``--wait``: and for its MLflow tracking
    agent to complete the MLflow run) and return the exit code of its outcome (:data:`EXIT_CODES`); a failure is
    told on stderr with its traceback."""
    if not args.wait:
        if args.json:
            print_json(run_summary(run))
        return EXIT_OK
    try:
        state = run.wait(progress=not args.quiet, raise_on_failure=False)
    except KeyboardInterrupt as interrupted:  # Run.wait has cancelled a cold run; a warm one goes on, and it says so
        if str(interrupted):
            print(f"nbtrain {args.command}: {interrupted}", file=sys.stderr)
        return EXIT_INTERRUPTED
    run.wait_tracking()  # a CI job that waited reads the MLflow run next: complete, or its problem said
    if args.json:
        print_json(run_detail(run))
    else:
        print(run.summary())
    if state.value == "failed":
        failure = run.failure
        print(f"nbtrain {args.command}: run {run.id} failed: {failure.summary() if failure else 'unknown'}",
              file=sys.stderr)
        if failure is not None and failure.traceback:
            print(failure.traceback.rstrip(), file=sys.stderr)
        return EXIT_FAILED
    return EXIT_CANCELLED if state.value == "cancelled" else EXIT_OK
