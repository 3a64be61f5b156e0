"""Worker side of nbtrain: runs a bundle under ``accelerate launch`` and reports events.

Imports only the standard library, :mod:`nbtrain.events` and the bundle reader, so it can travel
inside a bundle to an image without nbtrain. Torch and Accelerate are imported only when present.
"""

from __future__ import annotations

from nbtrain.runtime.metrics import log

__all__ = ["log"]
