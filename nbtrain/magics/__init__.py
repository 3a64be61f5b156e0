"""IPython magics: ``%%distributed`` and ``%nbtrain``. Thin: parse -> call the client."""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(ipython: Any) -> None:
    """Register nbtrain's magics on ``ipython`` (an InteractiveShell)."""
    from nbtrain.magics.distributed import DistributedMagics
    from nbtrain.magics.manage import ManageMagics

    ipython.register_magics(DistributedMagics)
    ipython.register_magics(ManageMagics)
