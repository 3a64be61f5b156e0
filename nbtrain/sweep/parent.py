"""The sweep's MLflow parent run: created beside the first trial's MLflow run (same tracking store, same
experiment), each trial's MLflow run tagged as its child (``mlflow.parentRunId``), the best trial named on it at the
end. Only the sweep supervisor calls these (I/O: MLflow)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from nbtrain.store import Store
from nbtrain.sweep.record import SweepRecord, TrialEntry
from nbtrain.tracking.ledger import Ledger, Point
from nbtrain.tracking.links import LEDGER_NAME

if TYPE_CHECKING:
    from nbtrain.tracking.sink import MlflowSink

__all__ = ["finish_parent", "link_child", "trial_mlflow"]

PARENT_TAG = "mlflow.parentRunId"


def trial_mlflow(store: Store, run_id: str) -> tuple[str, str, str] | None:
    """(tracking URI, experiment id, MLflow run id) of trial run ``run_id`` once its tracking agent created it."""
    ledger = Ledger.load(store.run_dir(run_id) / LEDGER_NAME)
    if ledger.tracking_uri and ledger.experiment_id and ledger.mlflow_run_id:
        return ledger.tracking_uri, ledger.experiment_id, ledger.mlflow_run_id
    return None


def _sink(uri: str) -> MlflowSink:
    from nbtrain.tracking.sink import MlflowSink  # here: mlflow loads only when a sweep is tracked

    return MlflowSink(uri)


def _parent_params(record: SweepRecord) -> dict[str, str]:
    spec = record.spec
    params = {"sweep.kind": spec.kind.value, "sweep.trials": str(len(record.trials)),
              "sweep.concurrency": str(spec.concurrency), "sweep.early_stop": spec.early_stop.value}
    if spec.objective:
        params.update({"sweep.objective": spec.objective, "sweep.mode": spec.mode.value})
    for name, values in spec.params:
        params[f"sweep.param.{name}"] = str(getattr(values, "values", None) or values)[:500]
    return params


def link_child(record: SweepRecord, trial: TrialEntry, where: tuple[str, str, str]) -> None:
    """Tag ``trial``'s MLflow run (``where``: :func:`trial_mlflow`) as a child of the sweep's parent run, creating
    the parent first in the trial's experiment (``record.mlflow_parent``/``mlflow_uri`` set here)."""
    uri, experiment_id, child = where
    sink = _sink(uri)
    if record.mlflow_parent is None:
        tags = {"nbtrain.sweep": record.sweep_id, "nbtrain.kind": "sweep"}
        record.mlflow_parent = sink.create_run(experiment_id, record.sweep_id, int(record.created * 1000), tags)
        record.mlflow_uri = uri
        sink.log_params(record.mlflow_parent, _parent_params(record))
    trial_tags: Mapping[str, str] = {PARENT_TAG: record.mlflow_parent, "nbtrain.sweep": record.sweep_id,
                                     "nbtrain.sweep.trial": str(trial.index),
                                     **{f"nbtrain.sweep.param.{k}": v for k, v in trial.params.items()}}
    if trial.stopped:
        trial_tags = {**trial_tags, "nbtrain.sweep.stopped": trial.stopped[:5000]}
    sink.log(child, tags=trial_tags)
    trial.mlflow_run_id = child


def finish_parent(record: SweepRecord) -> None:
    """Name the best trial on the parent run (tags ``nbtrain.best_trial``/``nbtrain.best_run_id``, the metric
    ``best_<objective>``) and end it: FINISHED, or FAILED when the sweep failed."""
    if record.mlflow_parent is None or record.mlflow_uri is None:
        return
    sink = _sink(record.mlflow_uri)
    tags = {f"nbtrain.sweep.stopped.{t.index}": (t.stopped or "")[:5000] for t in record.trials if t.stopped}
    if record.best is not None:
        best = record.trials[record.best]
        tags.update({"nbtrain.best_trial": str(best.index), "nbtrain.best_run_id": str(best.run_id),
                     "nbtrain.best_params": ", ".join(f"{k}={v}" for k, v in best.params.items())})
        if best.mlflow_run_id:
            tags["nbtrain.best_mlflow_run_id"] = best.mlflow_run_id
    sink.log(record.mlflow_parent, tags=tags)
    if record.best is not None and record.spec.objective and record.trials[record.best].objective is not None:
        value = float(record.trials[record.best].objective or 0.0)
        sink.log(record.mlflow_parent, [Point(f"best_{record.spec.objective}", value, int(time.time() * 1000), 0)])
    sink.set_status(record.mlflow_parent, "failed" if record.error else "succeeded", int(time.time() * 1000))
