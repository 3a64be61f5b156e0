"""Local process-gang backend (the embedded default).

:class:`LocalBackend` loads on first use (PEP 562): the detached supervisor
(``python -m nbtrain.backends.local.supervisor``) imports this package too, and must reach its launchers
without paying for the planning side (the Accelerate config writer, YAML, the job spec).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbtrain.backends.local.backend import LocalBackend

__all__ = ["LocalBackend"]


def __getattr__(name: str) -> Any:
    if name == "LocalBackend":
        from nbtrain.backends.local.backend import LocalBackend

        return LocalBackend
    raise AttributeError(f"module 'nbtrain.backends.local' has no attribute {name!r}")
