"""Write a bundle to disk atomically, content-addressed: ``<root>/<digest>/``.

A bundle is private to its user: directories 0700, files 0600, whatever the umask (objects.pkl is pickled
notebook data). Workers run as the same user (local processes) or get the bundle's bytes (Kubernetes pods).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from nbtrain.errors import CaptureError

from .reader import MANIFEST_NAME

__all__ = ["write_bundle"]


def write_bundle(root: Path, digest: str, files: Mapping[str, bytes], manifest_bytes: bytes) -> Path:
    """Write ``files`` plus manifest.json into ``root/<digest>`` and return that directory.

    The files go to a temporary sibling directory that is then renamed into place, so a reader never
    sees a half-written bundle. If ``root/<digest>`` already exists it is kept as it is (same digest,
    same content) and the temporary copy is discarded. Missing directories are made 0700, files 0600.
    """
    from nbtrain.store import private_dir  # lazily: the bundle package stays importable on its own

    root = Path(root)
    target = root / digest
    if target.is_dir():
        return target
    private_dir(root)
    tmp = Path(tempfile.mkdtemp(prefix=f".{digest[:12]}.", suffix=".tmp", dir=root))  # 0700
    try:
        for rel, data in files.items():
            if PurePosixPath(rel).is_absolute() or ".." in PurePosixPath(rel).parts:
                raise CaptureError(f"Bundle file name {rel!r} is not a safe relative path.")
            path = tmp / rel
            private_dir(path.parent)
            _write_private(path, data)
        _write_private(tmp / MANIFEST_NAME, manifest_bytes)
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.is_dir():  # not the "someone else wrote it first" race
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
