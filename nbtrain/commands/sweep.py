"""``nbtrain sweep DIR`` (a sweep of an exported job; ``nbtrain submit DIR --sweep-param ...`` is the same),
``nbtrain sweeps [SWEEP] [--cancel]`` (list, or one sweep's summary; cancel it), and ``%nbtrain sweep SWEEP
[--cancel]`` / ``%nbtrain sweeps``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from nbtrain.commands._shared import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, print_json

__all__ = ["MAGIC_USAGE", "register", "register_magic", "submit_job_sweep"]

MAGIC_USAGE = """  sweep SWEEP [--out NAME] [--cancel]
                            attach to a sweep (e.g. after a kernel restart) and show it; --cancel: cancel it
  sweeps                    list sweeps (newest first)"""

_JOB_OPTIONS = "job options: overrides of nbtrain.toml for every trial, and the sweep options (docs/sweeps.md)"


def register(sub: Any) -> None:
    """Add ``nbtrain sweep`` and ``nbtrain sweeps``."""
    from nbtrain import flags

    p = sub.add_parser("sweep", help="run a job directory as a sweep of trials over its parameters")
    p.add_argument("directory", help="the job directory (from `nbtrain export`)")
    flags.add_arguments(p, "cli", job_title=_JOB_OPTIONS)
    p.set_defaults(handler=submit_job_sweep)
    p = sub.add_parser("sweeps", help="list sweeps, or show one (trials, states, why one was stopped, the best)")
    p.add_argument("sweep", nargs="?", default=None, help="sweep id or a unique prefix")
    p.add_argument("--json", action="store_true")
    p.add_argument("--cancel", action="store_true", help="cancel the sweep: waiting trials never start, running ones "
                                                         "are cancelled")
    p.set_defaults(handler=_cmd_sweeps)


def submit_job_sweep(args: argparse.Namespace) -> int:
    """Start the sweep the flags describe over job directory ``args.directory``; ``--wait``: until it is done."""
    from nbtrain.errors import SpecError
    from nbtrain.export.jobdir import load_job
    from nbtrain.profiles.apply import job_sources, resolve_args
    from nbtrain.store import Store
    from nbtrain.sweep.options import sweep_from_namespace
    from nbtrain.sweep.space import parse_sweep
    from nbtrain.sweep.start import check_names, plan_text, start_sweep, trial_specs

    sweep = sweep_from_namespace(args) or parse_sweep(sweep=None, params=[])
    job = load_job(Path(args.directory), accept_edits=args.accept_edits)
    toml_path = job.path / "nbtrain.toml"
    resolved = resolve_args(args, base=job.spec, base_sources=job_sources(toml_path), project_toml=toml_path)
    fixed: dict[str, str] = {}
    for pair in args.param or []:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise SpecError(f"--param {pair!r}: write it as NAME=VALUE, e.g. --param lr=3e-4.")
        fixed[name.strip()] = text
    check_names(sweep, job.parameters, what=f"the job {job.path} (nbtrain export --params)")
    trials = trial_specs(sweep, resolved.spec, lambda _base, values: job.with_parameters(resolved.spec,
                                                                                        {**fixed, **values}))
    store = Store()
    if args.dry_run:
        from nbtrain import client

        print(plan_text(sweep, trials, client.plan_bundle(job.bundle, trials[0][1], store=store).render()))
        return EXIT_OK
    job.bundle.write(store.bundles)
    notebook = {k: str(v) for k, v in (job.bundle.manifest.get("notebook") or {}).items() if v}
    notebook["job_dir"] = str(job.path.resolve())
    handle = start_sweep(sweep, trials, name=resolved.spec.name, bundle_digest=job.bundle.digest, store=store,
                         kind="job", notebook=notebook,
                         profile=resolved.profile.label if resolved.profile is not None else None)
    if not args.json or args.wait:
        print(f"{handle.id}: {len(trials)} trials, at most {sweep.concurrency} at a time on {resolved.spec.backend}",
              flush=True)
    if not args.wait:
        if args.json:
            print_json(handle.record.to_dict())
        return EXIT_OK
    try:
        state = handle.wait(progress=not args.quiet)
    except KeyboardInterrupt:
        print(f"nbtrain {args.command}: stopped waiting; sweep {handle.id} goes on (`nbtrain sweeps {handle.id}`)",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    if args.json:
        print_json(handle.record.to_dict())
    else:
        print(handle.summary())
    return EXIT_OK if state.value == "done" else EXIT_FAILED


def _sweeps_table(store: Any) -> str:
    from nbtrain.sweep.record import load_sweep, sweep_ids

    rows = []
    for sweep_id in sweep_ids(store):
        record = load_sweep(store, sweep_id)
        ended = sum(1 for t in record.trials if t.state.ended)
        age = time.time() - record.created
        rows.append(f"{sweep_id:<44} {record.state.value:<8} {ended}/{len(record.trials)} trials ended  "
                    f"{age / 60:.0f} min ago")
    return "\n".join(rows) or "no sweeps yet: start one with %%sweep or `nbtrain sweep DIR`"


def _cmd_sweeps(args: argparse.Namespace) -> int:
    from nbtrain.store import Store
    from nbtrain.sweep.handle import attach_sweep

    store = Store()
    if args.sweep is None and not args.cancel:
        if args.json:
            from nbtrain.sweep.record import load_sweep, sweep_ids

            print_json([load_sweep(store, s).to_dict() for s in sweep_ids(store)])
        else:
            print(_sweeps_table(store))
        return EXIT_OK
    if args.cancel and args.sweep is None:
        raise ValueError("--cancel: name the sweep to cancel: nbtrain sweeps SWEEP --cancel.")
    handle = attach_sweep(args.sweep, store=store)
    if args.cancel:
        handle.cancel("nbtrain sweeps --cancel")
    if args.json:
        print_json(handle.record.to_dict())
    else:
        print(handle.summary())
    return EXIT_OK


def register_magic(sub: Any) -> None:
    """Add ``%nbtrain sweep SWEEP`` and ``%nbtrain sweeps``."""
    p = sub.add_parser("sweep", add_help=False)
    p.add_argument("sweep")
    p.add_argument("--out", default=None)
    p.add_argument("--cancel", action="store_true")
    p.set_defaults(magic=_magic_sweep)
    p = sub.add_parser("sweeps", add_help=False)
    p.set_defaults(magic=lambda args, shell: print(_sweeps_table(_store())))


def _store() -> Any:
    from nbtrain.store import Store

    return Store()


def _magic_sweep(args: argparse.Namespace, shell: Any) -> Any:
    from nbtrain.errors import SpecError
    from nbtrain.sweep.handle import attach_sweep

    if args.out is not None and not args.out.isidentifier():
        raise SpecError(f"--out {args.out!r}: not a valid Python variable name.")
    handle = attach_sweep(args.sweep)
    if args.cancel:
        handle.cancel("%nbtrain sweep --cancel")
    print(handle.summary())
    if args.out is not None:
        shell.user_ns[args.out] = handle
        return None
    return handle
