"""The one place that knows ``accelerate launch``'s flags (pure).

Every backend builds its per-node command here, so a change in Accelerate's CLI is a one-file fix.
Measured facts this encodes (see DESIGN.md): a CPU gang needs ``--multi_gpu`` plus
``ACCELERATE_USE_CPU=1`` (MULTI_CPU over gloo; ``--cpu --num_processes 2`` starts only one process);
several nodes need one launcher each with ``--num_machines/--machine_rank/--main_process_ip/port``;
``--mixed_precision`` and ``--dynamo_backend`` are passed explicitly to silence default warnings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from nbtrain.backends.hang import effective_stall_after
from nbtrain.gang.files import AttemptLayout
from nbtrain.runtime.rankenv import rank_env
from nbtrain.spec import JobSpec, MixedPrecision, Strategy

__all__ = ["LaunchTarget", "accelerate_argv", "device_env", "launcher_env"]


@dataclass(frozen=True)
class LaunchTarget:
    """What each rank runs: a module (``-m``) or a script path, plus its arguments."""

    program: str
    args: tuple[str, ...] = ()
    module: bool = True


def accelerate_argv(
    spec: JobSpec,
    *,
    python: str,
    use_gpu: bool,
    node_rank: int | str,
    main_address: str,
    main_port: int,
    target: LaunchTarget,
    config_file: str | None = None,
    tee: str | None = None,
    log_dir: str | None = None,
) -> list[str]:
    """The argv of node ``node_rank``'s launcher (a list, never a shell string).

    ``config_file`` is the attempt's generated Accelerate config (:mod:`.accelerate_config`): with it no
    user-level config changes the run. Exactly one of ``--multi_gpu`` / ``--cpu`` / ``--use_fsdp`` /
    ``--use_deepspeed`` is passed (Accelerate's ``_validate_launch_command`` rejects pairs); multi-node
    DeepSpeed uses the ``standard`` launcher (one launcher per node, as for DDP), never ``pdsh``.
    ``node_rank`` may be a placeholder the executor expands (Kubernetes: ``$(NBTRAIN_NODE_RANK)``).
    ``tee``/``log_dir`` add torchelastic's ``--tee``/``--log_dir``: with ``tee="3"`` and
    ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="[rank${rank}]:"`` in the environment, every line a worker
    prints reaches the launcher's stdout/stderr prefixed with its global rank (measured with torch 2.x;
    without it worker output is inherited unprefixed and lines of different ranks interleave).
    """
    world = spec.world_size
    argv = [python, "-m", "accelerate.commands.launch"]
    if config_file is not None:
        argv += ["--config_file", config_file]
    if spec.strategy is Strategy.FSDP:
        argv += ["--use_fsdp", "--fsdp_version", str(spec.fsdp_version)]
    elif spec.strategy is Strategy.DEEPSPEED:
        argv.append("--use_deepspeed")
        if spec.nodes > 1:
            argv += ["--deepspeed_multinode_launcher", "standard"]
    elif world > 1:
        argv.append("--multi_gpu")  # with ACCELERATE_USE_CPU=1 this yields MULTI_CPU over gloo
    elif not use_gpu:
        argv.append("--cpu")
    mixed = spec.mixed_precision if use_gpu else MixedPrecision.NO
    argv += [
        "--num_processes", str(world),
        "--num_machines", str(spec.nodes),
        "--machine_rank", str(node_rank),
        "--main_process_ip", main_address,
        "--main_process_port", str(main_port),
        "--mixed_precision", mixed.value,
        "--dynamo_backend", "no",
        "--max_restarts", "0",
        "--monitor_interval", "0.1",
    ]
    if spec.nodes > 1:
        argv.append("--same_network")
    if tee is not None:
        argv += ["--tee", tee]
    if log_dir is not None:
        argv += ["--log_dir", log_dir]
    if target.module:
        argv.append("--module")
    argv.append(target.program)
    argv += list(target.args)
    return argv


def device_env(use_gpu: bool, gpu_ids: tuple[str, ...] = ()) -> dict[str, str]:
    """Environment that pins a launcher to its device set: GPU ids, or CPU mode."""
    if use_gpu:
        return {"CUDA_VISIBLE_DEVICES": ",".join(gpu_ids), "ACCELERATE_USE_CPU": "0"}
    return {"ACCELERATE_USE_CPU": "1", "CUDA_VISIBLE_DEVICES": ""}


def launcher_env(spec: JobSpec, *, run_id: str, attempt: int, checkpoint_dir: str, attempt_dir: Path | None,
                 node_rank: int | None = None, devices: Mapping[str, str] = {}, omp_threads: int = 1) -> dict[str, str]:
    """The environment of one node's launcher for ``spec`` (:func:`nbtrain.runtime.rankenv.rank_env` with the
    spec's values): events, logs and the result in ``attempt_dir`` (None: the ranks do not see the store)."""
    files = None if attempt_dir is None else AttemptLayout(attempt_dir)
    return rank_env(
        run_id=run_id, attempt=attempt, collective_timeout_s=spec.collective_timeout_s, tracked=spec.tracking,
        stall_s=effective_stall_after(spec.stall_after_s, spec.hang_timeout_s), checkpoint_dir=checkpoint_dir,
        keep_checkpoints=spec.keep_checkpoints, user_env=spec.env, device_env=devices, node_rank=node_rank,
        events_dir=None if files is None else str(files.events), logs_dir=None if files is None else str(files.logs),
        result_path=None if files is None else str(files.result), omp_threads=omp_threads)
