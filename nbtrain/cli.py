"""``nbtrain``: the command line for terminals and CI (export, submit, runs, status, logs, cancel, ...).

Output contract:

- human-readable text on stdout by default; ``--json`` on every listing (runs, status, submit,
  export, doctor) prints one JSON document instead;
- on failure, one line ``nbtrain COMMAND: REASON`` on stderr (details, e.g. a traceback, may follow)
  and a non-zero exit code (:data:`EXIT_CODES`); ``submit --wait`` exits with the job's outcome;
- while waiting, a rewriting status line on a TTY (stderr), plain lines every few seconds otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nbtrain.commands._shared import (
    EXIT_CODES,
    EXIT_ENVIRONMENT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    NotAvailable,
    finish,
    print_json,
)
from nbtrain.errors import (
    BackendError,
    BundleIntegrityError,
    CaptureError,
    EnvironmentProblem,
    NbtrainError,
    RunFailedError,
    RunNotFoundError,
    SpecError,
)
from nbtrain.listing import runs_table
from nbtrain.runjson import run_detail, run_summary, spec_json

__all__ = ["EXIT_CODES", "main"]

class _UsageFailure(Exception):
    """Raised instead of argparse's exit, so `main` can return the code (tests call main directly too)."""


def apply_overrides(spec: Any, args: argparse.Namespace) -> Any:
    """``spec`` with the job options typed on the command line applied (validated again).

    The flags are those of %%distributed (one table: :mod:`nbtrain.flags`); NAME=VALUE mappings add to
    nbtrain.toml's. Raises SpecError naming the flag and the allowed values.
    """
    from nbtrain.flags import spec_from_namespace

    return spec_from_namespace(args, base=spec)


# ---------------------------------------------------------------------------------------------- output


def _runs_table(rows: list[dict[str, Any]]) -> str:
    return runs_table(rows, now=time.time(), empty="no runs yet: start one with `nbtrain submit DIR` or %%distributed")


# ---------------------------------------------------------------------------------------------- commands


def _params(pairs: list[str] | None) -> dict[str, str]:
    values: dict[str, str] = {}
    for pair in pairs or []:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise SpecError(f"--param {pair!r}: write it as NAME=VALUE, e.g. --param lr=3e-4.")
        values[name.strip()] = text
    return values


def _cmd_submit(args: argparse.Namespace) -> int:
    from nbtrain import client
    from nbtrain.export.jobdir import load_job
    from nbtrain.profiles import render_sources
    from nbtrain.profiles.apply import job_sources, resolve_args
    from nbtrain.sweep.options import sweep_given

    if sweep_given(args):  # a sweep option: the job runs as a sweep of trials (nbtrain sweep DIR)
        from nbtrain.commands.sweep import submit_job_sweep

        return submit_job_sweep(args)
    job = load_job(Path(args.directory), accept_edits=args.accept_edits)
    toml_path = job.path / "nbtrain.toml"
    resolved = resolve_args(args, base=job.spec, base_sources=job_sources(toml_path), project_toml=toml_path)
    spec = job.with_parameters(resolved.spec, _params(args.param))
    if args.dry_run:
        print(client.plan_bundle(job.bundle, spec).render())
        print()
        print(render_sources(resolved))
        return EXIT_OK
    notebook = {k: str(v) for k, v in (job.bundle.manifest.get("notebook") or {}).items() if v}
    notebook["job_dir"] = str(job.path.resolve())
    run = client.submit_bundle(job.bundle, spec, notebook=notebook,
                               profile=resolved.profile.label if resolved.profile is not None else None)
    if not args.json or args.wait:
        print(f"{run.id}: submitted {spec.nodes} node(s) x {spec.procs} process(es) on {spec.backend}", flush=True)
    return finish(run, args)


def _cmd_runs(args: argparse.Namespace) -> int:
    from nbtrain.client.run import Run
    from nbtrain.store import Store

    store = Store()
    records, problems = store.scan()
    rows = []
    for record in records:  # one damaged file leaves its run out, named, and the others listed
        try:
            rows.append(run_summary(Run(record, store)))
        except (NbtrainError, OSError, ValueError) as error:
            problems.append(f"{error}" if str(record.run_id) in str(error) else f"run {record.run_id}: {error}")
    for problem in problems:
        print(f"nbtrain runs: left out {problem}", file=sys.stderr)
    if args.json:
        print_json(rows)
    else:
        print(_runs_table(rows))
    return EXIT_OK


def _attach(run_id: str) -> Any:
    """The run's handle; a run still to be tracked whose MLflow agent died (killed, a reboot) gets a new one."""
    from nbtrain import client
    from nbtrain.store import Store
    from nbtrain.tracking.starter import ensure_agent

    store = Store()
    run = client.attach(run_id, store=store, watch=False)
    try:
        # from the record as saved now: nothing when tracking is off, the agent lives, or MLflow has it all
        ensure_agent(store, store.load(run.id))
    except OSError as error:
        print(f"nbtrain: MLflow tracking of run {run.id}: could not restart its tracking agent: {error}",
              file=sys.stderr)
    return run


def _cmd_status(args: argparse.Namespace) -> int:
    run = _attach(args.run)
    if args.json:
        print_json(run_detail(run))
    else:
        print(run.summary())
    return EXIT_OK


def _cmd_logs(args: argparse.Namespace) -> int:
    run = _attach(args.run)
    if args.all or args.output:
        if not (args.all and args.output) or args.follow:
            raise SpecError("--all and -o go together (`nbtrain logs RUN --all -o logs.zip`), without --follow.")
        from nbtrain.commands._logszip import write_logs_zip

        names = write_logs_zip(run, Path(args.output))
        print(f"{args.output}: {len(names)} file(s) of run {run.id} ({', '.join(n for n in names if '/' not in n)} "
              f"and {sum('/' in n for n in names)} log(s))")
        return EXIT_OK
    if not 0 <= args.rank < run.spec.world_size:
        raise SpecError(f"--rank {args.rank}: run {run.id} has ranks 0-{run.spec.world_size - 1}.")
    if not args.follow:
        text = run.logs(args.rank, tail=args.tail)
        if text:
            print(text)
        return EXIT_OK
    cursor = run.cursor()
    try:
        while True:
            terminal = run.status().terminal  # read after the verdict, so nothing written before it is missed
            batch = cursor.poll()
            for line in batch.lines:
                if line.rank == args.rank:
                    print(line.text, flush=True)
            if terminal and not batch.lines:
                return EXIT_OK
            if not batch.lines:
                time.sleep(0.2)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _cmd_cancel(args: argparse.Namespace) -> int:
    run = _attach(args.run)
    run.cancel()
    print(f"{run.id}: {run.status().value}")
    return EXIT_OK


def _cmd_resume(args: argparse.Namespace) -> int:
    run = _attach(args.run)
    resume = getattr(run, "resume", None)
    if resume is None:
        raise NotAvailable(
            f"not available yet: resume arrives with checkpoints; to run {run.id}'s job again, "
            "`nbtrain submit` its job directory."
        )
    resumed = resume()
    if not args.json or args.wait:
        print(f"{resumed.id}: resumed as a new attempt of {run.id}", flush=True)
    return finish(resumed, args)


def _cmd_export(args: argparse.Namespace) -> int:
    from nbtrain.export.static import export_notebook

    result = export_notebook(Path(args.notebook), Path(args.out) if args.out else None,
                             cell=args.cell, tag=args.tag, strict=args.strict)
    if args.json:
        print_json({
            "directory": str(result.directory), "cell": result.cell, "digest": result.job.digest,
            "spec": spec_json(result.spec), "files": sorted(result.job.files),
            "parameters": [{"name": p.name, "option": p.option, "type": p.kind, "default": p.default}
                           for p in result.job.parameters],
            "computed": list(result.computed), "kubernetes": list(result.job.k8s),
            "kubernetes_missing": result.job.k8s_missing, "notes": list(result.job.notes),
        })
    else:
        print(result.summary())
        print(f"next: nbtrain submit {result.directory} --wait")
    return EXIT_OK


def _cmd_manifests(args: argparse.Namespace) -> int:
    from nbtrain.export.jobdir import load_job
    from nbtrain.export.manifests import manifest_yaml

    job = load_job(Path(args.directory), accept_edits=args.accept_edits)
    spec = job.with_parameters(apply_overrides(job.spec, args), {})
    print(manifest_yaml(spec, job.bundle).rstrip("\n"))  # --flavor (an override) picks the flavor
    return EXIT_OK


def _cmd_gangs(args: argparse.Namespace) -> int:
    from nbtrain.store import Store
    from nbtrain.warm.manage import gangs_table, stop_gangs

    if args.action == "stop":
        print("\n".join(stop_gangs(Store(), args.gang)))
    else:
        print(gangs_table(Store()))
    return EXIT_OK


def _cmd_doctor(args: argparse.Namespace) -> int:
    from nbtrain.doctor import render, run_checks

    checks = run_checks()
    names = {c.name for c in checks}
    checks += [c for c in extra_checks() if c.name not in names]
    selected = _doctor_selection(args)
    if selected is not None:
        from nbtrain.backends import get_backend

        name, settings = selected
        checks += get_backend(name).doctor_checks(settings)
    if args.json:
        print_json([{"name": c.name, "ok": c.ok, "detail": c.detail, "fix": c.fix} for c in checks])
    else:
        print(render(checks))
    return EXIT_OK if all(c.ok for c in checks) else EXIT_FAILED


def _doctor_selection(args: argparse.Namespace) -> tuple[str, dict[str, Any]] | None:
    """The backend whose own checks (:meth:`~nbtrain.backends.base.Backend.doctor_checks`) ``nbtrain doctor`` runs,
    and their settings; None when none is selected. Asked (``--backend NAME``), else selected by NBTRAIN_BACKEND,
    else by ./nbtrain.toml (``[job] backend``). The settings: nbtrain.toml's ``[NAME]`` table, ``--partition`` over
    it. An unreadable nbtrain.toml selects nothing and sets nothing (``nbtrain submit`` reports it)."""
    import os

    from nbtrain.tomlfile import project_file, read_toml

    try:
        data = read_toml(project_file())
    except (OSError, SpecError):
        data = {}
    job = data.get("job")
    if args.backend is not None:
        from nbtrain.registry import backend_names, unknown_backend

        if args.backend not in backend_names():
            raise SpecError(unknown_backend(args.backend))
        name = args.backend
    else:
        name = (os.environ.get("NBTRAIN_BACKEND", "").strip().lower()
                or str((job if isinstance(job, dict) else {}).get("backend") or ""))
    if not name:
        return None
    if args.backend is None:
        from nbtrain.registry import backend_names

        if name not in backend_names():  # the backends line of the checks names what is installed
            return None
    table = data.get(name)
    settings = dict(table) if isinstance(table, dict) else {}
    if args.partition:
        settings["partition"] = args.partition
    return name, settings


def extra_checks() -> list[Any]:
    """Cluster access and tracking reachability (informational unless configured and broken)."""
    import os

    from nbtrain.doctor import Check

    checks = []
    try:
        from nbtrain.backends import get_backend

        get_backend("kubernetes")
        config = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            checks.append(Check("kubernetes", True, "in-cluster service account"))
        elif any(Path(p).is_file() for p in config.split(os.pathsep)):
            checks.append(Check("kubernetes", True, f"kubeconfig {config}"))
        else:
            checks.append(Check("kubernetes", True, f"no kubeconfig ({config}): --backend kubernetes cannot reach a cluster"))
    except NbtrainError as error:
        checks.append(Check("kubernetes", True, f"backend not available ({error}); local runs are unaffected"))
    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    import importlib.util

    if importlib.util.find_spec("mlflow") is None:
        checks.append(Check("tracking", False, "mlflow is not installed", "pip install mlflow"))
    elif uri.startswith(("http://", "https://")):
        import urllib.request

        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=3) as response:
                checks.append(Check("tracking", True, f"{uri} answers ({response.status})"))
        except OSError as error:
            checks.append(Check("tracking", False, f"{uri} is not reachable ({error})",
                                "start the MLflow server or fix MLFLOW_TRACKING_URI"))
    else:
        checks.append(Check("tracking", True, f"local MLflow store {uri or 'sqlite:///mlflow.db (default)'}"))
    return checks


# ---------------------------------------------------------------------------------------------- parser


_JOB_OPTIONS = "job options: overrides of nbtrain.toml, the same flags as %%distributed (docs/options.md)"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit code 2 (argparse's own convention)
        raise _UsageFailure(f"{self.prog}: {message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    """The ``nbtrain`` argument parser (one sub-parser per command)."""
    epilog = "exit codes:\n" + "\n".join(f"  {code:<4}{what}" for code, what in EXIT_CODES.items())
    parser = _Parser(prog="nbtrain", description="Export notebooks as jobs, submit them, follow runs.",
                     epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    from nbtrain import __version__, flags

    parser.add_argument("--version", action="version", version=f"nbtrain {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("submit", help="run a job directory (from `nbtrain export`)")
    p.add_argument("directory", help="the job directory")
    flags.add_arguments(p, "cli", job_title=_JOB_OPTIONS)
    p.set_defaults(handler=_cmd_submit)

    p = sub.add_parser("runs", help="list runs, newest first")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_runs)
    p = sub.add_parser("status", help="state, gang, metrics and failure of a run")
    p.add_argument("run", help="run id or a unique prefix of one")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_status)
    p = sub.add_parser("logs", help="one rank's output")
    p.add_argument("run")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--tail", type=int, default=None, help="only the last N lines")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing until the run ends")
    p.add_argument("--all", action="store_true", help="every rank of every attempt, with the failure report (-o)")
    p.add_argument("-o", "--output", default=None, metavar="ZIP", help="with --all: the zip file to write")
    p.set_defaults(handler=_cmd_logs)
    p = sub.add_parser("cancel", help="end every process of a run")
    p.add_argument("run")
    p.set_defaults(handler=_cmd_cancel)
    p = sub.add_parser("resume", help="run a finished run again as a new attempt, from its last checkpoint")
    p.add_argument("run")
    p.add_argument("--wait", action="store_true", help="wait for the new attempt; exit with its outcome")
    p.add_argument("--quiet", action="store_true", help="no progress line while waiting")
    p.add_argument("--json", action="store_true", help="print the run as JSON")
    p.set_defaults(handler=_cmd_resume)

    p = sub.add_parser("export", help="write a notebook's %%%%distributed cell as a job directory")
    p.add_argument("notebook", help="the .ipynb file (read only; nothing in it is executed)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--cell", help="cell id or 1-based position (default: the last %%%%distributed cell)")
    which.add_argument("--tag", help="the cell carrying this tag")
    p.add_argument("-o", "--out", help="job directory (default: NOTEBOOK-job next to the notebook)")
    p.add_argument("--strict", action="store_true",
                   help="refuse values computed in the notebook instead of re-running their statements")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_export)

    p = sub.add_parser("manifests", help="print a job's Kubernetes manifests (YAML; --flavor job|pytorchjob|jobset|trainjob)")
    p.add_argument("directory")
    p.add_argument("--accept-edits", action="store_true", help=argparse.SUPPRESS)
    flags.add_arguments(p, "cli", spec_only=True, job_title=_JOB_OPTIONS)
    p.set_defaults(handler=_cmd_manifests)

    p = sub.add_parser("gangs", help="list warm gangs (--warm runs); `nbtrain gangs stop [GANG]` ends them")
    p.add_argument("action", nargs="?", choices=("list", "stop"), default="list")
    p.add_argument("gang", nargs="?", default=None, help="a gang id or a unique prefix (stop: default every gang)")
    p.set_defaults(handler=_cmd_gangs)

    p = sub.add_parser("doctor", help="check the environment, devices, cluster access and tracking")
    p.add_argument("--json", action="store_true")
    p.add_argument("--backend", default=None, metavar="BACKEND",
                   help="an installed backend (the backends line lists them): also check this backend's access (slurm: client, controller, store seen from the nodes); "
                        "default: the one NBTRAIN_BACKEND or ./nbtrain.toml selects")
    p.add_argument("--partition", default=None, help="the Slurm partition whose nodes the store probe runs on")
    p.set_defaults(handler=_cmd_doctor)

    from nbtrain.commands import register_all

    register_all(sub)  # commands in their own modules (nbtrain/commands/)
    return parser


def _exit_code(error: BaseException) -> int:
    if isinstance(error, (EnvironmentProblem, BackendError, OSError)):
        return EXIT_ENVIRONMENT
    if isinstance(error, RunFailedError):
        return EXIT_FAILED
    if isinstance(error, (SpecError, CaptureError, RunNotFoundError, BundleIntegrityError, NotAvailable, ValueError)):
        return EXIT_USAGE
    return EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit code (``python -m nbtrain`` and the ``nbtrain`` script exit with it)."""
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except _UsageFailure as error:
        print(str(error), file=sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.handler(args))
    except BrokenPipeError:  # `nbtrain runs | head`: the reader left; not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        print(f"nbtrain {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (NbtrainError, OSError, ValueError) as error:
        first, _, rest = str(error).strip().partition("\n")
        print(f"nbtrain {args.command}: {first}", file=sys.stderr)
        if rest:
            print(rest, file=sys.stderr)
        return _exit_code(error)
