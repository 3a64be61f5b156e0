"""``%%distributed``: run the cell as an Accelerate gang (local processes or Kubernetes pods)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import MagicArgumentParser, parse_argstring

from nbtrain import flags
from nbtrain.errors import BackendError, CaptureError, EnvironmentProblem, SpecError
from nbtrain.spec import JobSpec

__all__ = ["DistributedMagics", "spec_from_args"]

# Options that still act with --resume: they shape the capture of this cell, not the run's spec.
_CAPTURE_FIELDS = frozenset({"max_capture_mb", "allow_secrets"})


def spec_from_args(args: argparse.Namespace) -> JobSpec:
    """The JobSpec of parsed ``%%distributed`` flags: defaults < ``--profile`` < flags (:mod:`nbtrain.profiles`).

    Bad values, an unknown profile and a flag changing a value the profile locks become UsageError naming the
    flag, the value and what to do.
    """
    return _resolved(args).spec


def _resolved(args: argparse.Namespace) -> Any:
    """:func:`nbtrain.profiles.apply.resolve_args` of ``args``, SpecError as UsageError (nothing started yet)."""
    from nbtrain.profiles.apply import resolve_args

    try:
        return resolve_args(args)
    except SpecError as error:
        raise UsageError(str(error)) from None


def _with_flags(func: Callable[..., Any]) -> Any:  # Any, like IPython's own untyped magic decorators
    """IPython's ``@magic_arguments`` with the flags of the one table (:mod:`nbtrain.flags`).

    Sets ``func.parser`` (what ``parse_argstring`` reads) and makes the full help the docstring, so
    ``%%distributed?`` (``%%sweep?``) lists every flag.
    """
    # prog "%distributed": IPython's help formatter puts one more "%" in front of the usage line.
    parser = flags.build_parser("magic", parser_class=MagicArgumentParser, prog=f"%{func.__name__}",
                                description=func.__doc__)
    func.parser = parser  # type: ignore[attr-defined]
    func.__doc__ = parser.format_help()
    return func


def _notebook_info(shell: Any) -> dict[str, Any]:
    """Notebook path and cell id when the kernel knows them (JupyterLab sends both); best effort."""
    info: dict[str, Any] = {}
    path = shell.user_ns.get("__session__") or os.environ.get("JPY_SESSION_NAME")
    if isinstance(path, str) and path:
        info["path"] = path
    kernel = getattr(shell, "kernel", None)
    try:
        parent = kernel.get_parent() if kernel is not None else {}
        cell_id = (parent or {}).get("metadata", {}).get("cellId")
        if cell_id:
            info["cell_id"] = str(cell_id)
    except Exception:  # noqa: BLE001 - metadata is optional
        pass
    return info


@magics_class
class DistributedMagics(Magics):
    """Holds the ``%%distributed`` cell magic."""

    @cell_magic
    @_with_flags
    def distributed(self, line: str, cell: str) -> Any:
        """Run this cell as a distributed Accelerate gang and return a Run handle.

        The cell and everything it uses from the notebook (imports, functions, classes, values) are
        packaged into a bundle; ``--dry-run`` shows exactly what would ship. The cell returns at once
        (``--block`` waits); the value of its last expression on rank 0 is ``run.result()``.

        Example::

            %%distributed --nodes 2 --gpus 2 --name digits --out run
            accelerator = Accelerator()
            ...
        """
        return self._cell(self.distributed, "distributed", line, cell)

    @cell_magic
    @_with_flags
    def sweep(self, line: str, cell: str) -> Any:
        """Run this cell as a sweep of trials over its parameters and return a Sweep handle (docs/sweeps.md).

        The options of ``%%distributed`` shape every trial; the sweep options say what varies (``--sweep-param``
        NAME=VALUES, NAME a plain value the cell uses), how many run at once, the objective and early stopping.
        ``sweep.trials()`` are ordinary runs; ``sweep.best()`` the best one; ``%nbtrain sweep ID`` after a restart.

        Example::

            %%sweep --sweep-param lr=1e-3,1e-2 --sweep-param width=8,16,32 --objective loss --concurrency 2
            ...
        """
        return self._cell(self.sweep, "sweep", line, cell)

    def _cell(self, magic: Any, name: str, line: str, cell: str) -> Any:
        """``%%distributed`` or ``%%sweep`` (a sweep: any sweep option given, or ``%%sweep``)."""
        from nbtrain.magics.sweep import sweep_of

        try:
            args = parse_argstring(magic, line)
        except UsageError:
            raise
        except SystemExit as error:  # argparse on a bad value type
            raise UsageError(f"%%{name} {line}: {error}") from None
        sweep = sweep_of(args, required=name == "sweep")
        resolved = _resolved(args)
        spec = resolved.spec
        if args.resume:
            ignored = [o.flag for o in flags.given_options(args) if o.field not in _CAPTURE_FIELDS]
            ignored += ["--profile"] if args.profile else []
            if ignored:
                raise UsageError(
                    f"%%distributed --resume {args.resume}: {', '.join(ignored)} would be ignored: a resumed run keeps "
                    f"its own spec. Drop {'them' if len(ignored) > 1 else 'it'}, or start a new run without --resume."
                )
        if args.out is not None and not args.out.isidentifier():
            raise UsageError(f"--out {args.out!r}: not a valid Python variable name.")
        from nbtrain.bundle import CaptureOptions, capture_cell
        from nbtrain.client import plan_bundle, submit_bundle
        from nbtrain.profiles import render_sources

        shell = self.shell
        assert shell is not None  # a registered magic always has its shell
        source = shell.transform_cell(cell)
        history = [h for h in shell.user_ns.get("In", []) if isinstance(h, str)]
        notebook = _notebook_info(shell)
        try:
            bundle = capture_cell(
                source, shell.user_ns, history=history[:-1] if history else [],
                options=CaptureOptions(max_pickle_bytes=int(spec.max_capture_mb * 1024 * 1024),
                                       allow_secrets=spec.allow_secrets),
                cell_line_offset=1, notebook=notebook,
            )
        except CaptureError as error:
            raise UsageError(f"%%distributed: nothing was submitted. {error}") from None
        if args.resume:
            return self._resume(args, bundle)
        if sweep is not None:
            from nbtrain.magics.sweep import start_cell_sweep

            return start_cell_sweep(shell, args, sweep, bundle, resolved, notebook, magic=name)
        try:
            if args.dry_run:
                plan = plan_bundle(bundle, spec)
                print(bundle.report())
                print()
                print(plan.render())
                print()
                print(render_sources(resolved))
                return None
            run = submit_bundle(bundle, spec, notebook=notebook,
                                profile=resolved.profile.label if resolved.profile is not None else None)
        except (EnvironmentProblem, SpecError, BackendError) as error:
            raise UsageError(f"%%distributed: nothing was submitted. {error}") from None
        if args.out:
            shell.user_ns[args.out] = run
        handle_name = args.out or "run"
        print(
            f"{run.id}: submitted {spec.nodes} node(s) x {spec.procs} process(es) on {spec.backend}."
            + ("" if args.block else f" The kernel is free: {handle_name}.wait(), .logs(rank=0), .metrics(), .cancel().")
        )
        if not args.no_monitor:
            run.show()
        if args.block:
            run.wait()
            return None
        return None if args.out else run

    def _resume(self, args: Any, bundle: Any) -> Any:
        """``--resume RUN``: this cell's bundle, RUN's spec, a new attempt of RUN from its latest checkpoint.

        With ``--dry-run`` it prints what would ship and the plan of that attempt, and launches nothing.
        """
        from nbtrain import client
        from nbtrain.errors import NbtrainError
        from nbtrain.store import Store

        shell = self.shell
        assert shell is not None
        store = Store()
        if args.dry_run:
            try:
                plan = client.plan_resume(args.resume, bundle, store=store)
            except (NbtrainError, EnvironmentProblem, SpecError) as error:
                raise UsageError(f"%%distributed --resume {args.resume} --dry-run: {error}") from None
            print(bundle.report())
            print()
            print(plan.render())
            return None
        try:
            run = client.attach(args.resume, store=store, watch=False)
            bundle.write(store.bundles)
            run.relaunch(bundle.digest, kind="resume")
        except (NbtrainError, EnvironmentProblem, SpecError) as error:
            raise UsageError(f"%%distributed --resume {args.resume}: nothing was submitted. {error}") from None
        if args.out:
            shell.user_ns[args.out] = run
        print(f"{run.id}: resumed as attempt {run.record.latest_attempt} with this cell's code "
              f"({run.spec.nodes} node(s) x {run.spec.procs} process(es), the run's own spec).")
        if not args.no_monitor:
            run.show()
        if args.block:
            run.wait()
            return None
        return None if args.out else run
