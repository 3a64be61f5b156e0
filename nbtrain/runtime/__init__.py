"""Worker side of nbtrain: runs a bundle under ``accelerate launch`` and reports events.

Imports only the standard library, :mod:`nbtrain.events` and the bundle reader, so it can travel
inside a bundle to an image without nbtrain. Torch and Accelerate are imported only when present.
``log`` loads on first use (PEP 562): the supervisor imports :mod:`nbtrain.runtime.watchdog` on its way to
starting the launchers and must not pay for the metrics side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbtrain.runtime.metrics import log

__all__ = ["log"]


def __getattr__(name: str) -> Any:
    if name == "log":
        from nbtrain.runtime.metrics import log

        return log
    raise AttributeError(f"module 'nbtrain.runtime' has no attribute {name!r}")
