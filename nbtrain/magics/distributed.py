"""``%%distributed``: run the cell as an Accelerate gang (local processes or Kubernetes pods)."""

from __future__ import annotations

import os
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from nbtrain.errors import BackendError, CaptureError, EnvironmentProblem, SpecError
from nbtrain.spec import JobSpec

__all__ = ["DistributedMagics", "spec_from_args"]


def _parse_env(pairs: list[str] | None, flag: str = "--env") -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} {pair!r}: write it as NAME=VALUE, e.g. {flag} NCCL_DEBUG=INFO.")
        env[key] = value
    return env


def _parse_tolerations(items: list[str] | None) -> tuple[dict[str, str], ...]:
    out = []
    for item in items or []:
        head, sep, effect = item.rpartition(":")
        key, eq, value = head.partition("=")
        if not sep or not key or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise UsageError(
                f"--toleration {item!r}: write it as KEY[=VALUE]:EFFECT with EFFECT one of NoSchedule, "
                "PreferNoSchedule, NoExecute, e.g. nvidia.com/gpu:NoSchedule."
            )
        toleration = {"key": key, "effect": effect, "operator": "Equal" if eq else "Exists"}
        if eq:
            toleration["value"] = value
        out.append(toleration)
    return tuple(out)


def spec_from_args(args: Any) -> JobSpec:
    """Turn parsed magic arguments into a JobSpec; bad values become UsageError naming the flag."""
    try:
        return JobSpec(
            name=args.name or "run",
            nodes=args.nodes,
            procs_per_node=args.gpus,
            device=args.device,
            strategy=args.strategy,
            mixed_precision=args.mixed_precision,
            backend=args.backend or os.environ.get("NBTRAIN_BACKEND", "local"),
            image=args.image,
            env=_parse_env(args.env, "--env"),
            timeout_s=args.timeout,
            collective_timeout_s=args.collective_timeout,
            max_capture_mb=args.max_capture_mb,
            allow_secrets=args.allow_secrets,
            experiment=args.experiment,
            tracking=not args.no_tracking,
            checkpoint_dir=args.checkpoint_dir,
            max_restarts=args.max_restarts,
            keep_checkpoints=args.keep_checkpoints,
            namespace=args.namespace,
            queue=args.queue,
            flavor=args.flavor,
            service_account=args.service_account,
            cpu=args.cpu,
            memory=args.memory,
            node_selector=_parse_env(args.node_selector, "--node-selector"),
            tolerations=_parse_tolerations(args.toleration),
            secret_env=_parse_env(args.secret_env, "--secret-env"),
        )
    except SpecError as error:
        raise UsageError(str(error)) from None


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

    @magic_arguments()
    @argument("--nodes", type=int, default=1, help="Number of nodes (one launcher each). Default 1.")
    @argument("--gpus", type=int, default=1,
              help="GPUs per node; on a machine without GPUs, worker processes per node (CPU, gloo). Default 1.")
    @argument("--name", default=None, help="Run name (used in the run id). Default 'run'.")
    @argument("--out", default=None, help="Bind the Run handle to this variable name in the notebook.")
    @argument("--block", action="store_true", help="Wait for the run to end; raise if it fails.")
    @argument("--dry-run", action="store_true", help="Show what would ship and the launch plan; submit nothing.")
    @argument("--no-monitor", action="store_true", help="Do not display the live monitor widget under the cell.")
    @argument("--backend", default=None, help="local (default) or kubernetes. Env default: NBTRAIN_BACKEND.")
    @argument("--device", default="auto", help="auto (GPU when present, else CPU), gpu or cpu.")
    @argument("--strategy", default="ddp", help="ddp (default), fsdp or deepspeed.")
    @argument("--mixed-precision", default="no", help="no, fp16, bf16 or fp8 (GPU only).")
    @argument("--image", default=None, help="Container image (kubernetes backend).")
    @argument("--env", action="append", metavar="NAME=VALUE", help="Environment variable for every rank (repeatable).")
    @argument("--timeout", type=float, default=None, help="Fail the run after this many seconds.")
    @argument("--collective-timeout", type=float, default=600.0,
              help="Seconds before a hung collective fails the gang (torch's default is 30 min). Default 600.")
    @argument("--max-capture-mb", type=float, default=50.0, help="Cap on pickled notebook objects. Default 50.")
    @argument("--allow-secrets", action="store_true", help="Ship values that look like secrets anyway.")
    @argument("--experiment", default=None, help="MLflow experiment (default: the notebook's name).")
    @argument("--no-tracking", action="store_true",
              help="Don't record the run in MLflow (NBTRAIN_TRACKING=0 makes that the default).")
    @argument("--checkpoint-dir", default=None, help="Checkpoint root for nbtrain.save_checkpoint.")
    @argument("--max-restarts", type=int, default=0, help="Restart the gang from its last checkpoint up to K times.")
    @argument("--keep-checkpoints", type=int, default=3, help="Complete checkpoints kept per run. Default 3.")
    @argument("--resume", default=None, metavar="RUN",
              help="Relaunch RUN (same spec) with this cell's code as a new attempt, from its latest checkpoint.")
    @argument("--namespace", default=None, help="Kubernetes namespace (default: the kubeconfig context's).")
    @argument("--queue", default=None, help="Kueue LocalQueue: the job waits for all-or-nothing admission.")
    @argument("--flavor", default="job", help="Kubernetes object: job (Indexed Job, default), pytorchjob or jobset.")
    @argument("--service-account", default=None, help="Kubernetes service account of the pods.")
    @argument("--cpu", default=None, help="CPU request per pod, e.g. 8 (kubernetes).")
    @argument("--memory", default=None, help="Memory request per pod, e.g. 64Gi (kubernetes).")
    @argument("--node-selector", action="append", metavar="KEY=VALUE", help="Node selector label (repeatable).")
    @argument("--toleration", action="append", metavar="KEY[=VALUE]:EFFECT", help="Pod toleration (repeatable).")
    @argument("--secret-env", action="append", metavar="NAME=SECRET/KEY",
              help="Environment variable from a Kubernetes Secret, by reference (repeatable).")
    @cell_magic
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
        try:
            args = parse_argstring(self.distributed, line)
        except UsageError:
            raise
        except SystemExit as error:  # argparse on a bad value type
            raise UsageError(f"%%distributed {line}: {error}") from None
        spec = spec_from_args(args)
        if args.out is not None and not args.out.isidentifier():
            raise UsageError(f"--out {args.out!r}: not a valid Python variable name.")
        from nbtrain.bundle import CaptureOptions, capture_cell
        from nbtrain.client import plan_bundle, submit_bundle

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
        try:
            if args.dry_run:
                plan = plan_bundle(bundle, spec)
                print(bundle.report())
                print()
                print(plan.render())
                return None
            run = submit_bundle(bundle, spec, notebook=notebook)
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
        """``--resume RUN``: this cell's bundle, RUN's spec, a new attempt of RUN from its latest checkpoint."""
        from nbtrain import client
        from nbtrain.errors import NbtrainError
        from nbtrain.store import Store

        shell = self.shell
        assert shell is not None
        store = Store()
        try:
            run = client.attach(args.resume, store=store, watch=False)
            bundle.write(store.bundles)
            run._relaunch(bundle.digest, kind="resume")
        except (NbtrainError, EnvironmentProblem, SpecError) as error:
            raise UsageError(f"%%distributed --resume {args.resume}: nothing was submitted. {error}") from None
        if args.out:
            shell.user_ns[args.out] = run
        print(f"{run.id}: resumed as attempt {run.record.attempts[-1]['attempt']} with this cell's code "
              f"({run.spec.nodes} node(s) x {run.spec.procs} process(es), the run's own spec).")
        if not args.no_monitor:
            run.show()
        if args.block:
            run.wait()
            return None
        return None if args.out else run
