"""The sweep side of ``%%distributed``/``%%sweep``: the cell's parameters made options of its bundle, one spec per
trial, then :func:`nbtrain.sweep.start.start_sweep` (the supervisor takes it from there)."""

from __future__ import annotations

import argparse
from typing import Any

from IPython.core.error import UsageError

from nbtrain.errors import BackendError, EnvironmentProblem, SpecError
from nbtrain.sweep.space import SweepSpec

__all__ = ["start_cell_sweep", "sweep_of"]


def sweep_of(args: argparse.Namespace, *, required: bool) -> SweepSpec | None:
    """The cell's SweepSpec (None: not a sweep); UsageError for a bad sweep option, a sweep with --resume, or
    ``%%sweep`` without ``--sweep-param``."""
    from nbtrain.sweep.options import sweep_from_namespace, sweep_given

    given = sweep_given(args)
    if not given and not required:
        return None
    magic = "%%sweep" if required else "%%distributed"
    if args.resume:
        raise UsageError(f"{magic} --resume {args.resume}: a sweep starts new runs; resume one trial with "
                         f"%%distributed --resume RUN, or drop --resume.")
    try:
        from nbtrain.sweep.space import parse_sweep

        spec = sweep_from_namespace(args) if given else parse_sweep(sweep=None, params=[])
    except SpecError as error:
        raise UsageError(f"{magic}: nothing was submitted. {error}") from None
    assert spec is not None  # sweep options were given
    return spec


def start_cell_sweep(shell: Any, args: argparse.Namespace, sweep: SweepSpec, bundle: Any, resolved: Any,
                     notebook: dict[str, Any], *, magic: str = "sweep") -> Any:
    """Start the sweep of the captured cell (``--dry-run``: print the trials and the first one's plan); ``magic``:
    the cell magic's name, for messages."""
    from nbtrain.bundle.model import CaptureKind
    from nbtrain.client import plan_bundle
    from nbtrain.export.parameters import ENV_NAME, add_parameters, params_env
    from nbtrain.store import Store
    from nbtrain.sweep.start import check_names, plan_text, start_sweep, trial_specs

    names = [name for name, _ in sweep.params]
    literals = [c.name for c in bundle.captured if c.kind is CaptureKind.LITERAL and c.name in shell.user_ns]
    spec = resolved.spec
    try:
        check_names(sweep, literals, what="this cell (plain values it uses: numbers, strings, lists...)")
        bundle, parameters = add_parameters(bundle, names, {n: shell.user_ns[n] for n in names})
        known = {p.name: p for p in parameters}

        def with_params(base: Any, values: Any) -> Any:
            return base.with_changes(env={**base.env, ENV_NAME: params_env(known, values,
                                                                           allow_secrets=base.allow_secrets)})

        trials = trial_specs(sweep, spec, with_params)
        store = Store()
        if args.dry_run:
            print(bundle.report())
            print()
            print(plan_text(sweep, trials, plan_bundle(bundle, trials[0][1], store=store).render()))
            return None
        bundle.write(store.bundles)
        handle = start_sweep(sweep, trials, name=spec.name, bundle_digest=bundle.digest, store=store,
                             notebook=notebook,
                             profile=resolved.profile.label if resolved.profile is not None else None)
    except (EnvironmentProblem, SpecError, BackendError) as error:
        raise UsageError(f"%%{magic}: nothing was submitted. {error}") from None
    if args.out:
        shell.user_ns[args.out] = handle
    name = args.out or "sweep"
    print(f"{handle.id}: {len(trials)} trials, at most {sweep.concurrency} at a time on {spec.backend}. The kernel is "
          f"free: {name}.wait(), .summary(), .trials(), .best(); %nbtrain sweep {handle.id} after a restart.")
    if args.block:
        handle.wait()
        print(handle.summary())
        return None
    return None if args.out else handle
