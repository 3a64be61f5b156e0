"""Configurations as run params: nested mappings flattened to ``{"optimizer.lr": "0.1"}`` strings (stdlib only).

Shared by every path that reports params from the ranks: ``init_trackers``' config (:mod:`.hooks`),
``get_tracker("mlflow").store_init_configuration`` (:mod:`.trackers`) and a Trainer's arguments (:mod:`.hfcallback`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_PARAM_CHARS", "flatten_params"]

MAX_PARAM_CHARS = 500  # MLflow's limit on a param value


def flatten_params(config: Any, prefix: str = "") -> dict[str, str]:
    """``init_trackers``' config as flat ``{"optimizer.lr": "0.1"}`` strings (nested mappings joined with dots)."""
    out: dict[str, str] = {}
    if not isinstance(config, dict):
        config = getattr(config, "__dict__", None) or {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten_params(value, f"{name}."))
        else:
            out[name] = str(value)[:MAX_PARAM_CHARS]
    return out
