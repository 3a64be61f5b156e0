"""The thin I/O layer over ``mlflow.MlflowClient`` (the one module of nbtrain that imports mlflow).

Only the client API is used, never the fluent API's global active run: a kernel may track its own
runs with ``mlflow.start_run`` while nbtrain forwards others from a background thread.

MLflow talks from the forwarder's thread: its log records (database migrations, HTTP retries) would
land in whatever notebook cell runs at that moment, so they are dropped for that thread only
(:class:`_QuietThread`), and ``set_terminated``'s "View run at" print is avoided; failures surface
as run notices instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from nbtrain.tracking.ledger import Point

__all__ = ["THREAD_PREFIX", "MlflowSink", "default_tracking_uri"]

THREAD_PREFIX = "nbtrain-mlflow"
MAX_PARAMS_PER_BATCH = 100
STATUS = {"succeeded": "FINISHED", "failed": "FAILED", "cancelled": "KILLED"}


class _QuietThread(logging.Filter):
    """Drops log records emitted by nbtrain's forwarder threads."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.threadName or "").startswith(THREAD_PREFIX)


_quiet_lock = threading.Lock()
_quiet_installed = False


def _install_quiet() -> None:
    """Filter mlflow's handler (its logger does not propagate) and the loggers that retry HTTP."""
    global _quiet_installed
    with _quiet_lock:
        if _quiet_installed:
            return
        quiet = _QuietThread()
        mlflow_logger = logging.getLogger("mlflow")
        mlflow_logger.addFilter(quiet)
        for handler in mlflow_logger.handlers:
            handler.addFilter(quiet)
        for name in ("urllib3.connectionpool", "urllib3.util.retry", "alembic.runtime.migration"):
            logging.getLogger(name).addFilter(quiet)
        _quiet_installed = True


def default_tracking_uri() -> str:
    """MLflow's own resolution: ``mlflow.set_tracking_uri``, ``MLFLOW_TRACKING_URI``, else its default.

    MLflow 3's default is ``sqlite:///mlflow.db`` in the current directory (``./mlruns`` when that
    already holds file-store data), returned as an absolute URI, so a later re-attach from another
    directory still finds the run (the forwarder stores the resolved URI in tracking.json).
    """
    import mlflow

    _install_quiet()
    return str(mlflow.get_tracking_uri())


def sqlite_path(tracking_uri: str) -> Path | None:
    """The database file of a ``sqlite:///PATH`` tracking URI (relative to this directory when relative), else None.
    """
    prefix = "sqlite:///"
    if not tracking_uri.startswith(prefix) or tracking_uri == prefix or ":memory:" in tracking_uri:
        return None
    return Path(tracking_uri[len(prefix):].split("?", 1)[0])


class MlflowSink:
    """One MLflow tracking server or store, seen through ``MlflowClient``."""

    def __init__(self, tracking_uri: str) -> None:
        from mlflow import MlflowClient

        _install_quiet()  # after the import: mlflow's handler exists only then

        self.tracking_uri = tracking_uri
        database = sqlite_path(tracking_uri)
        if database is None:
            self.client = MlflowClient(tracking_uri=tracking_uri)
            return
        # MLflow creates a new SQLite store's tables (its migrations) when a client first opens it: two processes
        # doing that at once (a sweep's concurrent trials' tracking agents, two runs started together) collide. One
        # creates it, the others wait and find it made.
        from nbtrain.filelock import locked

        database.parent.mkdir(parents=True, exist_ok=True)
        with locked(database.with_name(database.name + ".nbtrain-init.lock")):
            self.client = MlflowClient(tracking_uri=tracking_uri)
            self.client.search_experiments(max_results=1)

    # -- runs ---------------------------------------------------------------------------------------
    def experiment_id(self, name: str) -> str:
        """The id of experiment ``name``, created when missing (another process may race us)."""
        from mlflow.exceptions import MlflowException

        experiment = self.client.get_experiment_by_name(name)
        if experiment is None:
            try:
                return str(self.client.create_experiment(name))
            except MlflowException:
                experiment = self.client.get_experiment_by_name(name)
                if experiment is None:
                    raise
        if experiment.lifecycle_stage == "deleted":
            raise RuntimeError(
                f"the MLflow experiment {name!r} is deleted; restore it (`mlflow experiments restore "
                f"--experiment-id {experiment.experiment_id}`) or choose another with --experiment"
            )
        return str(experiment.experiment_id)

    def find_run(self, experiment_id: str, nbtrain_run_id: str) -> tuple[str, dict[str, str]] | None:
        """(MLflow run id, its params) of the run tagged ``nbtrain.run_id``, if one exists already."""
        found = self.client.search_runs(
            [experiment_id], filter_string=f"tags.`nbtrain.run_id` = '{nbtrain_run_id}'", max_results=1
        )
        if not found:
            return None
        return found[0].info.run_id, dict(found[0].data.params)

    def params_of(self, run_id: str) -> dict[str, str]:
        """The params already logged on ``run_id``."""
        return dict(self.client.get_run(run_id).data.params)

    def create_run(self, experiment_id: str, name: str, start_ms: int, tags: Mapping[str, str]) -> str:
        """A new RUNNING run; returns its id."""
        run = self.client.create_run(experiment_id, start_time=start_ms, tags=dict(tags), run_name=name)
        return str(run.info.run_id)

    def log(self, run_id: str, points: Sequence[Point] = (), params: Mapping[str, str] | None = None,
            tags: Mapping[str, str] | None = None) -> None:
        """One ``log_batch`` (the caller keeps within 1,000 points and 100 params/tags)."""
        from mlflow.entities import Metric, Param, RunTag

        self.client.log_batch(
            run_id,
            metrics=[Metric(p.key, p.value, p.timestamp, p.step) for p in points],
            params=[Param(k, v) for k, v in (params or {}).items()],
            tags=[RunTag(k, v) for k, v in (tags or {}).items()],
            synchronous=True,
        )

    def params(self, run_id: str) -> dict[str, str]:
        """The params the MLflow run has already."""
        return dict(self.client.get_run(run_id).data.params)

    def log_params(self, run_id: str, params: Mapping[str, str]) -> None:
        """Params in batches of 100."""
        items = list(params.items())
        for start in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self.log(run_id, params=dict(items[start:start + MAX_PARAMS_PER_BATCH]))

    def upload(self, run_id: str, local: Path, artifact_path: str | None = None) -> None:
        """Upload a file or a directory's contents under ``artifact_path``."""
        if local.is_dir():
            self.client.log_artifacts(run_id, str(local), artifact_path)
        else:
            self.client.log_artifact(run_id, str(local), artifact_path)

    def set_status(self, run_id: str, state: str, end_ms: int | None) -> None:
        """FINISHED/FAILED/KILLED for a terminal nbtrain state; RUNNING to reopen a resumed run."""
        status = STATUS.get(state, "RUNNING")
        if status == "RUNNING":
            self.client.update_run(run_id, status="RUNNING")
            return
        # MlflowClient.set_terminated prints "View run ... at: URL" to stdout for tracking servers, which
        # from this thread would land in a random cell; its store call is the same minus the print.
        store = getattr(getattr(self.client, "_tracking_client", None), "store", None)
        if store is None or not hasattr(store, "update_run_info"):
            self.client.set_terminated(run_id, status=status, end_time=end_ms)
            return
        from mlflow.entities import RunStatus

        store.update_run_info(run_id, run_status=RunStatus.from_string(status),
                              end_time=end_ms or int(time.time() * 1000), run_name=None)

    def status(self, run_id: str) -> str:
        """The run's MLflow status (FINISHED, FAILED, KILLED, RUNNING...)."""
        return str(self.client.get_run(run_id).info.status)

