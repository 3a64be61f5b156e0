"""``nbtrain rerun [RUN]`` / ``%nbtrain rerun [RUN]``: run a run again from scratch as a NEW run, with its code.

RUN (an id or a unique prefix) defaults to the newest failed run. The new run has RUN's bundle and spec, no
checkpoint; job options typed after it override that spec (``--nodes 1 --gpus 2``), through the same parsing as
``%%distributed`` and ``nbtrain submit`` (:mod:`nbtrain.flags`), and the locks of the profile RUN started from
hold (:func:`nbtrain.client.rerun`). ``nbtrain resume RUN`` is the other way back: a new attempt of the same run
from its latest checkpoint.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from nbtrain.spec import JobSpec

__all__ = ["MAGIC_USAGE", "overrides", "register", "register_magic"]

MAGIC_USAGE = """  rerun [RUN] [--out NAME] [--nodes N --gpus N ...]
                            run the last failed run (or RUN) again from scratch, same code;
                            job options given override its spec
"""


def overrides(args: argparse.Namespace) -> Callable[[JobSpec], JobSpec] | None:
    """``source spec -> new spec`` for :func:`nbtrain.client.rerun`: the job options typed in ``args`` applied to
    the source run's spec; None when none was typed (the run's own spec, unchanged)."""
    from nbtrain.flags import given_options, spec_from_namespace

    if not given_options(args):
        return None
    return lambda spec: spec_from_namespace(args, base=spec)


def _rerun(args: argparse.Namespace) -> Any:
    from nbtrain import client

    return client.rerun(args.run, spec=overrides(args))


def _said(run: Any) -> str:
    source = run.record.attempts[0].get("rerun_of", "?") if run.record.attempts else "?"
    return (f"{run.id}: started, a rerun of {source} ({run.spec.nodes} node(s) x {run.spec.procs} process(es) on "
            f"{run.record.backend})")


def register(sub: Any) -> None:
    """Add ``nbtrain rerun``."""
    from nbtrain import flags

    p = sub.add_parser("rerun", help="run a run (default: the newest failed one) again from scratch as a new run, "
                                     "same code; job options override its spec")
    p.add_argument("run", nargs="?", default=None, help="run id or a unique prefix (default: the newest failed run)")
    flags.add_arguments(p, "cli", spec_only=True, job_title="job options: overrides of the run's spec")
    p.add_argument("--wait", action="store_true", help="wait for the new run; exit with its outcome")
    p.add_argument("--quiet", action="store_true", help="no progress line while waiting")
    p.add_argument("--json", action="store_true", help="print the run as JSON")
    p.set_defaults(handler=_cmd_rerun)


def _cmd_rerun(args: argparse.Namespace) -> int:
    from nbtrain.commands._shared import finish

    run = _rerun(args)
    if not args.json or args.wait:
        print(_said(run), flush=True)
    return int(finish(run, args))


def register_magic(sub: Any) -> None:
    """Add ``%nbtrain rerun``."""
    from nbtrain import flags

    p = sub.add_parser("rerun", add_help=False)
    p.add_argument("run", nargs="?", default=None)
    p.add_argument("--out", default=None)
    flags.add_arguments(p, "magic", spec_only=True)  # overrides: %nbtrain rerun RUN --nodes 1 --gpus 2
    p.set_defaults(magic=_magic_rerun)


def _magic_rerun(args: argparse.Namespace, shell: Any) -> Any:
    from nbtrain.errors import SpecError

    if args.out is not None and not args.out.isidentifier():
        raise SpecError(f"--out {args.out!r}: not a valid Python variable name.")
    run = _rerun(args)
    if args.out is not None:
        shell.user_ns[args.out] = run
    print(_said(run) + ".")
    run.show()
    return None if args.out else run
