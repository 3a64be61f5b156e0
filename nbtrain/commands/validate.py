"""``nbtrain validate JOBDIR``: the pre-production ladder on a tiny budget, JUnit XML for CI (docs/validate.md).

Exit codes: 0 every rung passed or was skipped; 1 the job is broken (a rung failed because of its code or
configuration); 4 the platform is broken (accelerate or torch missing, the gang could not start, an unwritable
store). ``--profile NAME`` checks the job against a profile's locks in the config rung (a job exported from a
``--profile`` cell is checked against that profile's without it, as ``nbtrain submit`` would).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from nbtrain.validate.ladder import exit_code, junit_xml, render

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``nbtrain validate``."""
    p = sub.add_parser("validate", help="run a job directory's pre-production ladder (JUnit XML for CI)")
    p.add_argument("directory", help="the job directory (from `nbtrain export`)")
    p.add_argument("--steps", type=int, default=10, metavar="N",
                   help="steps of each run (NBTRAIN_MAX_STEPS; default 10)")
    p.add_argument("--procs", type=int, default=2, metavar="N",
                   help="processes of the distributed rung, on 1 node (default 2)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                   help="wall-clock limit of each run (default 300)")
    p.add_argument("--junit", default=None, metavar="PATH", help="write the outcome as JUnit XML to PATH")
    p.add_argument("--profile", default=None, metavar="NAME",
                   help="the config rung fails unless the job meets every option this profile locks "
                        "(default: the profile the job was exported from, if any)")
    p.set_defaults(handler=_cmd_validate)


def _cmd_validate(args: argparse.Namespace) -> int:
    from nbtrain.errors import SpecError
    from nbtrain.validate.runner import Settings, validate_job

    if args.steps < 1:
        raise SpecError(f"--steps {args.steps}: give at least 1 step.")
    if args.procs < 2:
        raise SpecError(f"--procs {args.procs}: the distributed rung needs at least 2 processes.")
    if not (math.isfinite(args.timeout) and args.timeout > 0):  # nan > 0 and inf > 0: never a wall-clock limit
        raise SpecError(f"--timeout {args.timeout}: give a positive, finite number of seconds (e.g. 300).")
    directory = Path(args.directory)
    profile = None
    if args.profile:
        from nbtrain.profiles.load import load_catalog

        profile = load_catalog().get(args.profile)  # the installed ones (and ./nbtrain.toml's), not the job's own

    def show(outcome: object) -> None:
        print(render([outcome]), flush=True)  # type: ignore[list-item]

    outcomes = validate_job(directory, Settings(args.steps, args.procs, args.timeout), report=show, profile=profile)
    code = exit_code(outcomes)
    if args.junit:
        path = Path(args.junit)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(junit_xml(outcomes, suite=f"nbtrain validate {directory}"), encoding="utf-8")
    failed = [o for o in outcomes if o.status.value == "failed"]
    for outcome in failed:
        blame = "your job is broken" if outcome.blame and outcome.blame.value == "job" else "the platform is broken"
        print(f"nbtrain validate: {outcome.rung.value} failed ({blame}): {outcome.message}", file=sys.stderr)
    return code
