"""Cell or function -> immutable, content-addressed :class:`Bundle`; and the worker-side check.

Capture (notebook side)::

    bundle = capture_cell(cell, shell.user_ns, history=shell.user_ns["In"])
    print(bundle.report())          # dry run: what ships, how, how big
    directory = bundle.write(root)  # root/<digest>/{manifest.json, main.py, objects.pkl, files/...}

Verify (worker side, first thing, before anything is unpickled)::

    manifest = verify_bundle(directory, expected_digest)

Importing this package is cheap: no torch, numpy, IPython or cloudpickle, and the capture machinery
loads on first use, so a worker importing :mod:`nbtrain.bundle.reader` pays only for the standard library.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .reader import RESULT_NAME, verify_bundle

if TYPE_CHECKING:
    from .capture import capture_cell, capture_function
    from .model import Bundle, CapturedName, CaptureKind, CaptureOptions

__all__ = [
    "RESULT_NAME",
    "Bundle",
    "CaptureKind",
    "CaptureOptions",
    "CapturedName",
    "capture_cell",
    "capture_function",
    "verify_bundle",
]

_LAZY = {
    "Bundle": ".model",
    "CaptureKind": ".model",
    "CaptureOptions": ".model",
    "CapturedName": ".model",
    "capture_cell": ".capture",
    "capture_function": ".capture",
}


def __getattr__(name: str) -> Any:
    """Load the capture side on first use (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nbtrain.bundle' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
