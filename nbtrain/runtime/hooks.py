"""Patches applied in the worker before user code runs (the only monkey-patching in nbtrain).

Why patch: users write plain Accelerate code (``accelerator.log``) and must not have to pass an nbtrain
tracker; and a hung collective must not wait torch's 30-minute default.
"""

from __future__ import annotations

import datetime
import functools
import os
from typing import Any

from nbtrain.runtime import context, metrics, progress


def install() -> None:
    """Install every hook; safe to call twice."""
    _patch_accelerator_log()
    _patch_process_group_timeout()
    progress.wrap_collectives()


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
    # monitor sees each rank's step (stragglers), then defers to Accelerate's trackers as usual.
    @functools.wraps(original)
    def log(self: Any, values: dict[str, Any], step: int | None = None, log_kwargs: dict[str, Any] | None = None) -> Any:
        metrics.record(values, step)
        return original(self, values, step=step, log_kwargs=log_kwargs or {})

    log._nbtrain = True  # type: ignore[attr-defined]
    cls.log = log


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
