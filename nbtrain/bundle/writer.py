"""Write a bundle to disk atomically, content-addressed: ``<root>/<digest>/``."""

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
    same content) and the temporary copy is discarded.
    """
    root = Path(root)
    target = root / digest
    if target.is_dir():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{digest[:12]}.", suffix=".tmp", dir=root))
    try:
        for rel, data in files.items():
            if PurePosixPath(rel).is_absolute() or ".." in PurePosixPath(rel).parts:
                raise CaptureError(f"Bundle file name {rel!r} is not a safe relative path.")
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        (tmp / MANIFEST_NAME).write_bytes(manifest_bytes)
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700; workers may run as another user
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
