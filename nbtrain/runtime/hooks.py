"""Patches applied in the worker before user code runs (the only monkey-patching in nbtrain).

Why patch: users write plain Accelerate code (``accelerator.log``, ``init_trackers``, ``log_with=``) and must not
have to pass an nbtrain tracker; a hung collective must not wait torch's 30-minute default; and progress is
judged from steps and collectives (``nbtrain.runtime.progress``).
"""

from __future__ import annotations

import datetime
import functools
import os
from typing import Any

from nbtrain.events import EventKind
from nbtrain.runtime import context, hftrainer, metrics, progress, stopping, trackers
from nbtrain.runtime.params import flatten_params


def install() -> None:
    """Install every hook; safe to call twice."""
    _patch_accelerator_log()
    _patch_trackers()
    _patch_process_group_timeout()
    progress.wrap_collectives()
    hftrainer.watch()


def _patch_accelerator_log() -> None:
    try:
        import accelerate
    except ImportError:  # plain torch code: nbtrain.log still works
        return
    cls = accelerate.Accelerator
    if getattr(cls.log, "_nbtrain", False):
        return
    original = cls.log

    # Accelerate's own log() only runs on the main process; this wrapper runs on every rank so the
    # monitor sees each rank's step (stragglers), then defers to Accelerate's trackers as usual (nbtrain's own
    # "mlflow" tracker among them skips what this recorded: trackers.quiet).
    @functools.wraps(original)
    def log(self: Any, values: dict[str, Any], step: int | None = None, log_kwargs: dict[str, Any] | None = None) -> Any:
        try:
            metrics.record(values, step)
        except (metrics.StepBudgetReached, stopping.StopAtStep):  # the last step's values still reach the trackers
            with trackers.quiet("log"):
                original(self, values, step=step, log_kwargs=log_kwargs or {})
            raise
        with trackers.quiet("log"):
            return original(self, values, step=step, log_kwargs=log_kwargs or {})

    log._nbtrain = True  # type: ignore[attr-defined]
    cls.log = log


def _patch_trackers() -> None:
    """``init_trackers(config=...)`` becomes the run's MLflow params, once, whatever trackers it starts; Accelerate's
    own MLflow tracker is replaced on the ranks by nbtrain's (:mod:`nbtrain.runtime.trackers`), so
    ``get_tracker("mlflow")`` logs params, metrics, artifacts and figures into nbtrain's MLflow run (a second MLflow
    run, made from a rank that may not even reach the tracking server, would only split the record). Other
    trackers (W&B, TensorBoard, ...) work as usual and receive the same config and ``accelerator.log`` values.
    With ``--no-tracking`` (:data:`context.ENV_TRACKED` "0") nbtrain records nothing, so the MLflow tracker stays.
    """
    try:
        import accelerate
        import accelerate.accelerator as accelerator_module
    except ImportError:
        return
    cls = accelerate.Accelerator
    if not getattr(cls.init_trackers, "_nbtrain", False):
        original_init = cls.init_trackers

        @functools.wraps(original_init)
        def init_trackers(self: Any, project_name: str, config: dict[str, Any] | None = None,
                          init_kwargs: dict[str, Any] | None = None) -> Any:
            ctx = context.current()
            if ctx is not None and ctx.rank == 0 and config:
                ctx.emit(EventKind.PARAMS, project=str(project_name), values=flatten_params(config))
            with trackers.quiet("config"):
                return original_init(self, project_name, config=config, init_kwargs=init_kwargs)

        init_trackers._nbtrain = True  # type: ignore[attr-defined]
        cls.init_trackers = init_trackers
    original_filter = accelerator_module.filter_trackers
    if getattr(original_filter, "_nbtrain", False):
        return

    @functools.wraps(original_filter)
    def filter_trackers(log_with: Any, logging_dir: Any = None) -> Any:
        chosen = original_filter(log_with, logging_dir)
        if os.environ.get(context.ENV_TRACKED) == "0":  # --no-tracking: the user's own MLflow tracker is the record
            return chosen
        kept = [t for t in chosen if str(getattr(t, "name", t)).lower() != "mlflow"]
        ctx = context.current()
        if len(kept) == len(chosen) or ctx is None:
            return chosen
        if ctx.rank == 0:
            ctx.emit(EventKind.NOTICE, message="Accelerator(log_with=...) asked for MLflow: accelerator.get_tracker("
                     "'mlflow') logs into nbtrain's MLflow run (params, metrics, artifacts, figures); Accelerate's own "
                     "MLflow tracker is not started on the ranks (the other trackers are)")
        return [trackers.make_tracker(), *kept]

    filter_trackers._nbtrain = True  # type: ignore[attr-defined]
    accelerator_module.filter_trackers = filter_trackers


def _patch_process_group_timeout() -> None:
    seconds = float(os.environ.get(context.ENV_COLLECTIVE_TIMEOUT, "0") or 0)
    if seconds <= 0:
        return
    import torch.distributed as dist

    if getattr(dist.init_process_group, "_nbtrain", False):
        return
    original = dist.init_process_group

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("timeout", datetime.timedelta(seconds=seconds))
        return original(*args, **kwargs)

    init_process_group._nbtrain = True  # type: ignore[attr-defined]
    dist.init_process_group = init_process_group
