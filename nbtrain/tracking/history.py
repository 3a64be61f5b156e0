"""nbtrain runs as MLflow remembers them, for ``nbtrain stats`` when the store no longer has them (pruned, or
run from another machine's store). Only plain dicts leave this module (mlflow is imported here, lazily).

What is read: every MLflow run carrying the ``nbtrain.run_id`` tag (``describe.run_tags``), with MLflow's own
status, start and end times and the ``mlflow.user``, ``nbtrain.backend``, ``nbtrain.nodes``, ``nbtrain.procs``,
``nbtrain.notebook`` and ``nbtrain.cell_id`` tags. One MLflow run is one nbtrain run (attempts are not
separate MLflow runs), so attempts, queue waits and checkpoints are not known for such runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["MLFLOW_STATES", "nbtrain_runs"]

#: MLflow run status -> nbtrain final state (RUNNING and SCHEDULED: not finished).
MLFLOW_STATES = {"FINISHED": "succeeded", "FAILED": "failed", "KILLED": "cancelled"}
_PAGE = 1000


def nbtrain_runs(tracking_uri: str, *, since_ms: int | None = None) -> Iterator[dict[str, Any]]:
    """Every nbtrain run in the MLflow at ``tracking_uri`` started at or after ``since_ms`` (None: all), as
    ``{"run_id", "user", "backend", "nodes", "procs", "notebook", "cell_id", "state", "start", "end"}`` (times in
    epoch seconds; ``state`` an nbtrain state, ``running`` while MLflow says RUNNING/SCHEDULED).

    Raises what MlflowClient raises for an unreachable or unreadable store (the caller says which URI failed).
    """
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    experiments = [e.experiment_id for e in client.search_experiments(view_type=ViewType.ACTIVE_ONLY)]
    where = "" if since_ms is None else f"attributes.start_time >= {int(since_ms)}"
    for start in range(0, len(experiments), 100):  # search_runs takes at most 100 experiments
        token: str | None = None
        while True:
            page = client.search_runs(experiments[start:start + 100], filter_string=where,
                                      max_results=_PAGE, page_token=token)
            for run in page:
                tags = run.data.tags
                if "nbtrain.run_id" in tags:
                    yield _row(tags, run.info)
            token = page.token
            if not token:
                break


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def _row(tags: dict[str, str], info: Any) -> dict[str, Any]:
    return {
        "run_id": tags["nbtrain.run_id"], "user": tags.get("mlflow.user"), "backend": tags.get("nbtrain.backend"),
        "nodes": _int(tags.get("nbtrain.nodes"), 1), "procs": _int(tags.get("nbtrain.procs"), 1),
        "notebook": tags.get("nbtrain.notebook"), "cell_id": tags.get("nbtrain.cell_id"),
        "state": MLFLOW_STATES.get(str(info.status), "running"),
        "start": info.start_time / 1000.0 if info.start_time else None,
        "end": info.end_time / 1000.0 if info.end_time else None,
    }
