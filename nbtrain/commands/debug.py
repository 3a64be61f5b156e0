"""``nbtrain debug RUN`` / ``%nbtrain debug RUN``: rerun a failed run small, with distributed debugging on.

The new run has the source run's code, at 1 node x 2 processes on CPU by default (``--nodes``, ``--procs`` and
every job option of ``nbtrain submit`` override), with (docs/debugging.md):

- ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` (torch checks that the ranks' collectives match, logs each one),
- ``PYTHONFAULTHANDLER=1`` and ``TORCH_SHOW_CPP_STACKTRACES=1`` (a crash prints every thread's stack),
- ``NCCL_DEBUG=INFO`` (+ ``NCCL_DEBUG_SUBSYS=INIT,COLL``) when the ranks use GPUs (NCCL is not used on CPU),
- short timeouts: collectives fail after 60 s, the run after 120 s without progress, stacks dumped after 30 s.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from nbtrain.spec import JobSpec

__all__ = ["DEBUG_ENV", "GPU_DEBUG_ENV", "MAGIC_USAGE", "debug_spec", "register", "register_magic"]

DEBUG_ENV: Mapping[str, str] = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL", "PYTHONFAULTHANDLER": "1",
                                "TORCH_SHOW_CPP_STACKTRACES": "1"}
GPU_DEBUG_ENV: Mapping[str, str] = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,COLL"}
COLLECTIVE_TIMEOUT_S, HANG_TIMEOUT_S, STALL_AFTER_S = 60.0, 120.0, 30.0

MAGIC_USAGE = """  debug RUN [--nodes N] [--procs N] [--out NAME] [job options]
                            rerun a failed run at 1 node x 2 CPU processes with distributed
                            debugging on (TORCH_DISTRIBUTED_DEBUG=DETAIL, faulthandler, short timeouts)
"""


def debug_spec(source: JobSpec, *, gpus: bool) -> JobSpec:
    """``source`` made small and verbose for debugging (pure): 1 x 2 on CPU unless ``gpus``, debug variables, short
    timeouts (never longer than the source's), no restarts, no warm gang. Typed overrides apply after this."""
    env = {**source.env, **DEBUG_ENV, **(GPU_DEBUG_ENV if gpus else {})}
    hang = min(source.hang_timeout_s, HANG_TIMEOUT_S) if source.hang_timeout_s else HANG_TIMEOUT_S
    return source.with_changes(
        name=f"{source.name}-debug"[:63], nodes=1, procs_per_node=2, device="gpu" if gpus else "cpu", env=env,
        collective_timeout_s=min(source.collective_timeout_s, COLLECTIVE_TIMEOUT_S), hang_timeout_s=hang,
        stall_after_s=min(source.stall_after_s, STALL_AFTER_S), max_restarts=0, warm=False)


def overrides(args: argparse.Namespace) -> Any:
    """``source spec -> debug spec`` for ``client.rerun``: :func:`debug_spec`, then the options the user typed."""
    from nbtrain.errors import SpecError
    from nbtrain.flags import spec_from_namespace

    if args.procs is not None:
        if hasattr(args, "procs_per_node"):
            raise SpecError(f"--procs {args.procs} and --gpus {args.procs_per_node}: give one of them.")
        args.procs_per_node = args.procs
    gpus = str(getattr(args, "device", "cpu")).lower() == "gpu"

    def make(source: JobSpec) -> JobSpec:
        spec = spec_from_namespace(args, base=debug_spec(source, gpus=gpus))
        if spec.device.value != "cpu" and not gpus:  # --device auto: NCCL matters once GPUs may be used
            spec = spec.with_changes(env={**GPU_DEBUG_ENV, **spec.env})
        return spec

    return make


def debug_base(args: argparse.Namespace) -> Any:
    """``source spec -> debug spec`` before the typed options: what a profile's locks are held against (the debug
    shape itself is allowed; an option the user types may not change a locked value)."""
    gpus = str(getattr(args, "device", "cpu")).lower() == "gpu"
    return lambda source: debug_spec(source, gpus=gpus)


def _add_options(p: argparse.ArgumentParser, surface: Any) -> None:
    from nbtrain import flags

    p.add_argument("run", help="run id or a unique prefix of one")
    p.add_argument("--procs", type=int, default=None, metavar="N", help="processes per node (the same as --gpus; "
                   "default 2)")
    flags.add_arguments(p, surface, spec_only=True)


def register(sub: Any) -> None:
    """Add ``nbtrain debug``."""
    p = sub.add_parser("debug", help="rerun a failed run at 1 node x 2 CPU processes with distributed debugging on")
    _add_options(p, "cli")
    p.add_argument("--wait", action="store_true", help="wait for the debug run; exit with its outcome")
    p.add_argument("--quiet", action="store_true", help="no progress line while waiting")
    p.add_argument("--json", action="store_true", help="print the run as JSON")
    p.set_defaults(handler=_cmd_debug)


def _cmd_debug(args: argparse.Namespace) -> int:
    from nbtrain import client
    from nbtrain.commands._shared import finish

    source = client.attach(args.run, watch=False)
    run = client.rerun(source.id, spec=overrides(args), locked_base=debug_base(args))
    spec = run.spec
    shown = ", ".join(f"{k}={v}" for k, v in sorted(spec.env.items()) if k in DEBUG_ENV or k in GPU_DEBUG_ENV)
    if not args.json or args.wait:
        print(f"{run.id}: debugging {source.id} at {spec.nodes} node(s) x {spec.procs_per_node} process(es) on "
              f"{spec.backend} ({spec.device.value}) with {shown}; collective timeout {spec.collective_timeout_s:g} s",
              flush=True)
    return int(finish(run, args))


def register_magic(sub: Any) -> None:
    """Add ``%nbtrain debug``."""
    p = sub.add_parser("debug", add_help=False)
    _add_options(p, "magic")
    p.add_argument("--out", default=None)
    p.set_defaults(magic=_magic_debug)


def _magic_debug(args: argparse.Namespace, shell: Any) -> Any:
    from nbtrain import client
    from nbtrain.errors import SpecError

    if args.out is not None and not args.out.isidentifier():
        raise SpecError(f"--out {args.out!r}: not a valid Python variable name.")
    source = client.attach(args.run, watch=False)
    run = client.rerun(source.id, spec=overrides(args), locked_base=debug_base(args))
    if args.out is not None:
        shell.user_ns[args.out] = run
    print(f"{run.id}: debugging {source.id} ({run.spec.nodes} node(s) x {run.spec.procs_per_node} process(es), "
          f"TORCH_DISTRIBUTED_DEBUG=DETAIL).")
    run.show()
    return None if args.out else run
