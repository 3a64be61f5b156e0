"""The environment of a warm rank: what ``accelerate launch`` and torchelastic would give the same rank.

Computed by Accelerate's own launcher code (``launch_command_parser``, ``_validate_launch_command``,
``prepare_multi_gpu_env``) from the very ``accelerate launch`` command a cold run of the plan executes, so a
warm rank sees the same ``ACCELERATE_*``/``FSDP_*`` settings, then torchelastic's per-worker variables with the
generation's store: ``TORCHELASTIC_USE_AGENT_STORE=True`` makes the ranks join the store the agent of node 0
holds for this generation (as torchelastic's own agent does) instead of rank 0 hosting one.

Imports Accelerate: only the agents (which pre-import it anyway) call :func:`accelerate_env`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["LAUNCH_MODULE", "WarmLaunchError", "accelerate_env", "launch_args", "worker_env"]

LAUNCH_MODULE = "accelerate.commands.launch"


class WarmLaunchError(ValueError):
    """A launch command a warm gang cannot reproduce (not a multi-process ``accelerate launch``)."""


def launch_args(argv: Sequence[str]) -> list[str]:
    """The arguments after ``-m accelerate.commands.launch`` of a launcher's argv."""
    try:
        return list(argv[list(argv).index(LAUNCH_MODULE) + 1:])
    except ValueError:
        raise WarmLaunchError(f"not an accelerate launch command: {' '.join(argv)[:200]}") from None


def accelerate_env(argv: Sequence[str], launcher_env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, Any]]:
    """The variables Accelerate's launcher adds for ``argv`` run with exactly ``launcher_env``, and its shape.

    Returns ``(env, shape)``: ``env`` holds only what the launcher sets or changes relative to ``launcher_env``;
    ``shape`` has ``nproc_per_node``, ``nnodes``, ``node_rank`` and ``master_addr``.
    """
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env

    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(launcher_env)
        base = dict(launcher_env)
        args = launch_command_parser().parse_args(launch_args(argv))
        args, _, _ = _validate_launch_command(args)
        if getattr(args, "use_deepspeed", False):
            raise WarmLaunchError("DeepSpeed launches through its own launcher; warm gangs do not reproduce it yet")
        if not ((args.multi_gpu or args.use_fsdp) and not args.cpu):
            raise WarmLaunchError("a warm gang reproduces multi-process launches (--multi_gpu) only")
        full = prepare_multi_gpu_env(args)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    env = {k: v for k, v in full.items() if base.get(k) != v}
    shape = {"nproc_per_node": int(args.nproc_per_node), "nnodes": int(getattr(args, "nnodes", 1) or 1),
             "node_rank": int(getattr(args, "node_rank", 0) or 0),
             "master_addr": str(getattr(args, "master_addr", None) or args.main_process_ip or "127.0.0.1")}
    return env, shape


def worker_env(*, rank: int, local_rank: int, node_rank: int, nproc_per_node: int, nnodes: int, master_addr: str,
               store_port: int, generation: int, run_id: str) -> dict[str, str]:
    """torchelastic's per-worker variables for one rank of a generation whose store the agent holds."""
    world = nproc_per_node * nnodes
    return {
        "RANK": str(rank), "LOCAL_RANK": str(local_rank), "GROUP_RANK": str(node_rank), "ROLE_RANK": str(rank),
        "ROLE_NAME": "default", "LOCAL_WORLD_SIZE": str(nproc_per_node), "WORLD_SIZE": str(world),
        "GROUP_WORLD_SIZE": str(nnodes), "ROLE_WORLD_SIZE": str(world), "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(store_port), "TORCHELASTIC_RESTART_COUNT": str(generation),
        "TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_RUN_ID": run_id, "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    }
