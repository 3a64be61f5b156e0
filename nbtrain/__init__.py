"""nbtrain: run a notebook cell as a distributed Accelerate gang, locally or on Kubernetes.

In a notebook::

    %load_ext nbtrain
    %%distributed --nodes 2 --gpus 2 --out run
    ...

From Python: ``nbtrain.distributed`` (decorator), ``nbtrain.attach``, ``nbtrain.attach_sweep``, ``nbtrain.runs``; in workers:
``nbtrain.log``, ``nbtrain.save_checkpoint``/``nbtrain.restore``/``nbtrain.checkpointing``,
``nbtrain.resolve``/``nbtrain.dataset_path`` (storage URIs). Importing this package is cheap: heavy modules load
on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

__all__ = [
    "JobSpec",
    "Run",
    "RunState",
    "__version__",
    "attach",
    "attach_sweep",
    "checkpointing",
    "dataset_path",
    "distributed",
    "load_ipython_extension",
    "log",
    "resolve",
    "restore",
    "runs",
    "save_checkpoint",
    "unload_ipython_extension",
]

_LAZY = {
    "JobSpec": ("nbtrain.spec", "JobSpec"),
    "Run": ("nbtrain.client", "Run"),
    "RunState": ("nbtrain.backends.base", "RunState"),
    "attach": ("nbtrain.client", "attach"),
    "attach_sweep": ("nbtrain.sweep", "attach_sweep"),
    "runs": ("nbtrain.client", "runs"),
    "distributed": ("nbtrain.decorator", "distributed"),
    "log": ("nbtrain.runtime.metrics", "log"),
    "dataset_path": ("nbtrain.storage.api", "dataset_path"),
    "resolve": ("nbtrain.storage.api", "resolve"),
    "restore": ("nbtrain.runtime.checkpoint", "restore"),
    "checkpointing": ("nbtrain.runtime.checkpoint", "checkpointing"),
    "save_checkpoint": ("nbtrain.runtime.checkpoint", "save_checkpoint"),
}


def __getattr__(name: str) -> Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'nbtrain' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    """jupyter_server discovery: the REST API under ``/nbtrain/`` (see nbtrain.server)."""
    from nbtrain.server import _jupyter_server_extension_points as points

    return points()


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext nbtrain``: registers ``%%distributed`` and ``%nbtrain``."""
    from nbtrain.magics import register

    register(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext nbtrain``: nothing to undo beyond IPython's own bookkeeping."""
