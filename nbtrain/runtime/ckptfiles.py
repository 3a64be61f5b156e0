"""The checkpoint layout shared by local directories (:mod:`.checkpoint`) and object storage (:mod:`.objstore`).

``ROOT/step-000000042/`` holds one checkpoint, complete once its ``manifest.json`` (the sha256 of every file) is
written; ``ROOT/latest`` names the newest committed one. Stdlib only: shipped to the ranks.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["LATEST", "MANIFEST", "TRAINER_KIND", "sha256_file", "step_name"]

MANIFEST = "manifest.json"
LATEST = "latest"
#: the manifest's ``extra["kind"]`` of a checkpoint committed from a ``transformers.Trainer`` checkpoint directory
TRAINER_KIND = "transformers.Trainer"


def step_name(step: int) -> str:
    """The directory name of the checkpoint of ``step``: ``step-000000042``."""
    return f"step-{step:09d}"


def sha256_file(path: Path) -> str:
    """The sha256 of the file at ``path`` (hex), read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
