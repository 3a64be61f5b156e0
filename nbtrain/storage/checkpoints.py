"""The run's checkpoint root from ``--checkpoint-dir`` (a path, ``file://``, an fsspec URL or ``checkpoint://``)."""

from __future__ import annotations

from pathlib import Path

from nbtrain.storage.fs import check_url
from nbtrain.storage.uris import StorageRoots, join, local_path, resolve

__all__ = ["run_checkpoint_root"]


def run_checkpoint_root(checkpoint_dir: str | None, run_id: str, *, default: Path,
                        roots: StorageRoots | None = None) -> str:
    """Where run ``run_id`` keeps its checkpoints: ``--checkpoint-dir``/<run id>, else ``default``.

    A local path or ``file://`` URL becomes an absolute local directory (as before URLs were accepted);
    ``checkpoint://PATH`` resolves through the checkpoints root (``roots``; read from the configuration
    when None); any other URL (``s3://bucket/prefix``) is kept as a URL after :func:`check_url` said
    its filesystem is installed. Raises SpecError with the value and the fix otherwise.
    """
    if not checkpoint_dir:
        return str(default)
    target = checkpoint_dir
    if target.startswith("checkpoint://"):
        if roots is None:
            from nbtrain.storage.config import load_roots

            roots = load_roots()
        target = resolve(target, roots)
    path = local_path(target)
    if path is not None:
        return str(Path(path).expanduser().resolve() / run_id)
    check_url(target, "--checkpoint-dir")
    return join(target, run_id)
