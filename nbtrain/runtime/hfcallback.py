"""nbtrain's ``TrainerCallback``: imported only once the user's code has imported ``transformers.trainer``.

See :mod:`nbtrain.runtime.hftrainer` for what it does and when it is added. Every rank reports the Trainer's logs
(they are the same on every rank: the loss is gathered before it is logged) so the monitor sees each rank's step;
rank 0 reports the params and commits checkpoints.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from nbtrain.events import EventKind
from nbtrain.runtime import context, metrics
from nbtrain.runtime.checkpoint import checkpointing, commit_copy
from nbtrain.runtime.ckptfiles import TRAINER_KIND
from nbtrain.runtime.params import flatten_params

__all__ = ["NbtrainCallback", "attach"]

_PREFIX_CHECKPOINT_DIR = "checkpoint"  # transformers.trainer_utils.PREFIX_CHECKPOINT_DIR


def attach(trainer: Any) -> None:
    """Add :class:`NbtrainCallback` to ``trainer``; drop transformers' MLflowCallback while nbtrain tracks the run."""
    ctx = context.current()
    handler = trainer.callback_handler
    if any(isinstance(cb, NbtrainCallback) for cb in handler.callbacks):
        return
    if os.environ.get(context.ENV_TRACKED) != "0":
        mlflow = [cb for cb in handler.callbacks if type(cb).__name__ == "MLflowCallback"]
        for cb in mlflow:
            handler.remove_callback(cb)
        if mlflow and ctx is not None and ctx.rank == 0:
            ctx.emit(EventKind.NOTICE, message="report_to='mlflow': the Trainer's logs and arguments go to nbtrain's "
                     "MLflow run; transformers' MLflowCallback is not used (it would open a second MLflow run)")
    trainer.add_callback(NbtrainCallback())


class NbtrainCallback(TrainerCallback):
    """The Trainer's logs, arguments, progress and checkpoints, reported to nbtrain."""

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        ctx = context.current()
        if ctx is None or ctx.rank != 0:
            return
        params: dict[str, Any] = {}
        config = getattr(model, "config", None)
        if config is not None and hasattr(config, "to_dict"):
            params.update(config.to_dict())
        params.update(args.to_dict())  # the Trainer's arguments win a clash, as in transformers' MLflowCallback
        params.pop("logging_dir", None)  # a new timestamped default per attempt: not a hyperparameter
        ctx.emit(EventKind.PARAMS, project="transformers.Trainer", values=flatten_params(params))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        ctx = context.current()
        if ctx is not None:
            ctx.last_step = int(state.global_step)  # the heartbeat's step between two logs

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if logs:
            total = int(state.max_steps) if getattr(state, "max_steps", 0) else None
            metrics.record(logs, int(state.global_step), total)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        ctx = context.current()
        if ctx is None or not checkpointing():
            return
        _barrier()  # every rank has written its part (its RNG state) before rank 0 copies the directory
        if ctx.rank != 0:
            return
        source = Path(args.output_dir) / f"{_PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        if not source.is_dir():
            return
        try:
            commit_copy(source, int(state.global_step), world_size=ctx.world_size,
                        extra={"kind": TRAINER_KIND, "source": str(source)})
        except RuntimeError as error:  # a remote --checkpoint-dir: the Trainer's own checkpoint stays the only one
            ctx.emit(EventKind.NOTICE, message=f"the Trainer's checkpoint {source} was not committed to nbtrain's "
                                               f"checkpoints: {error}")


def _barrier() -> None:
    try:
        import torch.distributed as dist
    except ImportError:
        return
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
