"""The files a worker needs to run a bundle on an image without nbtrain (e.g. a Kubernetes pod).

Backends without a shared install put these next to the bundle (under ``nbtrain/`` of a directory on
``PYTHONPATH``); ``python -m nbtrain.runtime.worker BUNDLE`` then works with only Python, torch and
accelerate (and cloudpickle when the bundle has ``objects.pkl``) in the image.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["RUNTIME_MODULES", "runtime_files"]

# Paths relative to the directory that contains the ``nbtrain`` package.
RUNTIME_MODULES = (
    "nbtrain/__init__.py",
    "nbtrain/errors.py",
    "nbtrain/events.py",
    "nbtrain/private.py",
    "nbtrain/bundle/__init__.py",
    "nbtrain/bundle/reader.py",
    "nbtrain/runtime/__init__.py",
    "nbtrain/runtime/checkpoint.py",
    "nbtrain/runtime/ckptfiles.py",
    "nbtrain/runtime/context.py",
    "nbtrain/runtime/hfcallback.py",
    "nbtrain/runtime/hftrainer.py",
    "nbtrain/runtime/hooks.py",
    "nbtrain/runtime/metrics.py",
    "nbtrain/runtime/objstore.py",
    "nbtrain/runtime/params.py",
    "nbtrain/runtime/progress.py",
    "nbtrain/runtime/stopping.py",
    "nbtrain/runtime/trackers.py",
    "nbtrain/runtime/watchdog.py",
    "nbtrain/runtime/worker.py",
    # nbtrain.resolve / nbtrain.dataset_path in training code (stdlib only)
    "nbtrain/secrets.py",
    "nbtrain/storage/__init__.py",
    "nbtrain/storage/api.py",
    "nbtrain/storage/config.py",
    "nbtrain/storage/uris.py",
)


def runtime_files() -> dict[str, bytes]:
    """``{relative path: content}`` of every module in :data:`RUNTIME_MODULES`, read from this install."""
    root = Path(__file__).resolve().parents[2]
    return {rel: (root / rel).read_bytes() for rel in RUNTIME_MODULES}
