"""The environment nbtrain gives every rank of a gang: the one builder every backend calls (stdlib only).

The names are the runtime's own contract (:mod:`nbtrain.runtime.context` reads them in the rank); this module
is the one place that writes them, so a backend says only where its ranks' files are and the run's limits:

- :func:`rank_env`: the variables of one node's launcher (run id and attempt, where events, logs and the
  result go, the node's index, the collective timeout, the stall threshold, tracking, the checkpoint root),
  over the user's ``--env`` (nbtrain's own names win) and with ``OMP_NUM_THREADS`` defaulted;
- :data:`PER_RUN_ENV`: those of them that name one run's files or limits (a warm gang's key sets them aside:
  :mod:`nbtrain.warm.key`).

A backend whose ranks cannot reach a shared store (Kubernetes) passes no directories and sets
``NBTRAIN_EVENT_STREAM`` itself; values known only on the node (``$(NBTRAIN_NODE_RANK)``) are the backend's.
"""

from __future__ import annotations

from collections.abc import Mapping

from nbtrain.runtime import context as rt
from nbtrain.runtime.checkpoint import ENV_CHECKPOINT_DIR, ENV_KEEP
from nbtrain.runtime.progress import ENV_STALL_S

__all__ = ["PER_RUN_ENV", "rank_env"]

#: Variables of the rank environment that name one run's files or limits (read by the worker per run).
PER_RUN_ENV = frozenset({
    rt.ENV_RUN_ID, rt.ENV_ATTEMPT, rt.ENV_EVENTS_DIR, rt.ENV_LOGS_DIR, rt.ENV_RESULT_PATH,
    ENV_CHECKPOINT_DIR, ENV_KEEP, ENV_STALL_S, rt.ENV_COLLECTIVE_TIMEOUT, rt.ENV_HEARTBEAT_S, "NBTRAIN_PARAMS",
})


def rank_env(*, run_id: str, attempt: int, collective_timeout_s: float, tracked: bool, stall_s: float,
             checkpoint_dir: str, keep_checkpoints: int, events_dir: str | None = None, logs_dir: str | None = None,
             result_path: str | None = None, node_rank: int | None = None, user_env: Mapping[str, str] = {},
             device_env: Mapping[str, str] = {}, omp_threads: int = 1) -> dict[str, str]:
    """The environment of one node's launcher (inherited by its ranks), on top of the launching process's.

    ``user_env`` (``--env``) first, then ``device_env`` (the node's GPUs or CPU mode), then nbtrain's own names,
    which no user value replaces. The directories and ``node_rank`` are set when given (None: the backend's ranks
    learn them otherwise). ``OMP_NUM_THREADS`` is ``omp_threads`` unless ``--env`` sets it.
    """
    env = {
        **user_env,
        **device_env,
        rt.ENV_RUN_ID: run_id,
        rt.ENV_ATTEMPT: str(attempt),
    }
    for name, value in ((rt.ENV_EVENTS_DIR, events_dir), (rt.ENV_LOGS_DIR, logs_dir),
                        (rt.ENV_RESULT_PATH, result_path),
                        (rt.ENV_NODE_RANK, None if node_rank is None else str(node_rank))):
        if value is not None:
            env[name] = value
    env.update({
        rt.ENV_COLLECTIVE_TIMEOUT: str(collective_timeout_s),
        rt.ENV_TRACKED: "1" if tracked else "0",
        ENV_STALL_S: str(stall_s),
        ENV_CHECKPOINT_DIR: checkpoint_dir,
        ENV_KEEP: str(keep_checkpoints),
        "PYTHONUNBUFFERED": "1",
    })
    env.setdefault("OMP_NUM_THREADS", str(omp_threads))
    return env
