"""``%nbtrain SUBCOMMAND``: runs, status, logs, cancel, attach, resume, gangs, gang stop, doctor, export; the
subcommands of :mod:`nbtrain.commands` modules (rerun, debug, validate, ...) join them."""

from __future__ import annotations

import argparse
import shlex
import time
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from nbtrain.errors import NbtrainError
from nbtrain.listing import runs_table

__all__ = ["ManageMagics"]

USAGE = """%nbtrain SUBCOMMAND ...

  runs                      list runs (newest first)
  status RUN                state, gang and failure of a run
  logs RUN [--rank N] [--tail N]   one rank's output
  cancel RUN                end every process of a run
  attach RUN [--out NAME]   rebuild the handle of a run (e.g. after a kernel restart)
  resume RUN [--out NAME]   relaunch a run from its latest checkpoint (a new attempt)
  gangs                     list warm gangs (shape, state, idle time, memory, generation, last recycle)
  gang stop [GANG]          end a warm gang (default: every warm gang)
  doctor                    check torch, accelerate, devices and the run store
  export [--out DIR] [--cell N|last] [--params A,B]
                            write a %%distributed cell (In[N], default the last) as a job
                            directory: train.py, nbtrain.toml, requirements.txt, k8s/, README.md

RUN is a run id or a unique prefix of one."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would exit the kernel's process otherwise
        raise UsageError(f"%nbtrain: {message}\n\n{usage()}")


def _parser() -> _Parser:
    parser = _Parser(prog="%nbtrain", add_help=False)
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("runs", add_help=False)
    for name in ("status", "cancel"):
        sub.add_parser(name, add_help=False).add_argument("run")
    logs = sub.add_parser("logs", add_help=False)
    logs.add_argument("run")
    logs.add_argument("--rank", type=int, default=0)
    logs.add_argument("--tail", type=int, default=None)
    attach = sub.add_parser("attach", add_help=False)
    attach.add_argument("run")
    attach.add_argument("--out", default=None)
    sub.add_parser("doctor", add_help=False)
    sub.add_parser("gangs", add_help=False)
    gang = sub.add_parser("gang", add_help=False)
    gang.add_argument("action", choices=["stop"])
    gang.add_argument("gang", nargs="?", default=None)
    resume = sub.add_parser("resume", add_help=False)
    resume.add_argument("run")
    resume.add_argument("--out", default=None)
    export = sub.add_parser("export", add_help=False)
    export.add_argument("--out", default=None)
    export.add_argument("--cell", default="last")
    export.add_argument("--params", default=None)
    from nbtrain.commands import register_all_magics

    register_all_magics(sub)  # %nbtrain subcommands of nbtrain/commands/ modules (they set `magic`)
    return parser


def usage() -> str:
    """USAGE plus the lines of the command modules' own ``%nbtrain`` subcommands."""
    from nbtrain.commands import magic_usage

    extra = magic_usage()
    head, sep, tail = USAGE.partition("\n\nRUN is")
    return head + ("\n" + extra if extra else "") + sep + tail


@magics_class
class ManageMagics(Magics):
    """Holds the ``%nbtrain`` line magic."""

    @line_magic
    def nbtrain(self, line: str) -> Any:
        """Manage runs: ``%nbtrain runs|status|logs|cancel|attach|doctor|export`` (``%nbtrain`` alone for help)."""
        words = shlex.split(line)
        if not words or words[0] in ("help", "-h", "--help"):
            print(usage())
            return None
        args = _parser().parse_args(words)
        from nbtrain import client

        try:
            if getattr(args, "magic", None) is not None:  # a command module's subcommand
                return args.magic(args, self.shell)
            if args.command == "runs":
                print(self._runs_table(client.runs()))
                return None
            if args.command in ("gangs", "gang"):
                from nbtrain.store import Store
                from nbtrain.warm.manage import gangs_table, stop_gangs

                print(gangs_table(Store()) if args.command == "gangs" else "\n".join(stop_gangs(Store(), args.gang)))
                return None
            if args.command == "doctor":
                from nbtrain.doctor import render, run_checks

                print(render(run_checks()))
                return None
            if args.command == "export":
                print(self._export(args).summary())
                return None
            run = client.attach(args.run, watch=args.command == "attach")
            if args.command == "resume":
                return self._show(run.resume(), args.out, f"resumed as attempt {run.record.latest_attempt}")
            if args.command == "status":
                print(run.summary())
            elif args.command == "logs":
                print(run.logs(args.rank, tail=args.tail))
            elif args.command == "cancel":
                run.cancel()
                print(f"{run.id}: {run.status().value}")
            elif args.command == "attach":
                if args.out:
                    if not args.out.isidentifier():
                        raise UsageError(f"--out {args.out!r}: not a valid Python variable name.")
                    assert self.shell is not None  # a registered magic always has its shell
                    self.shell.user_ns[args.out] = run
                    print(f"attached to {run.id} ({run.status().value}) as {args.out}")
                    return None
                return run
        except (NbtrainError, ValueError) as error:
            raise UsageError(f"%nbtrain {args.command}: {error}") from None
        return None

    def _show(self, run: Any, out: str | None, what: str) -> Any:
        """Bind ``run`` to ``out`` (if given), say what happened and display its monitor."""
        if out is not None:
            if not out.isidentifier():
                raise UsageError(f"--out {out!r}: not a valid Python variable name.")
            assert self.shell is not None  # a registered magic always has its shell
            self.shell.user_ns[out] = run
        print(f"{run.id}: {what} ({run.spec.nodes} node(s) x {run.spec.procs} process(es) on {run.record.backend}).")
        run.show()
        return None if out else run

    def _export(self, args: argparse.Namespace) -> Any:
        """``%nbtrain export``: the chosen ``%%distributed`` cell of ``In``, captured from the live namespace."""
        from pathlib import Path

        from nbtrain.export.live import export_live
        from nbtrain.magics.distributed import _notebook_info

        shell = self.shell
        assert shell is not None  # a registered magic always has its shell
        history = [h if isinstance(h, str) else "" for h in shell.user_ns.get("In", [])]
        params = [p.strip() for p in args.params.split(",") if p.strip()] if args.params is not None else None
        return export_live(
            shell.user_ns,
            history,
            transform=shell.transform_cell,
            out=Path(args.out).expanduser() if args.out else None,
            cell=args.cell,
            params=params,
            notebook=_notebook_info(shell),
        )

    @staticmethod
    def _runs_table(all_runs: list[Any]) -> str:
        rows = [run.snapshot().summary(notebook=run.notebook).to_json() for run in all_runs]
        return runs_table(rows, now=time.time(), empty="no runs yet: start one with %%distributed")
