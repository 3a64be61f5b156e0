"""Private files and directories of the store, whatever the umask (stdlib only: the ranks' runtime ships it).

Writers in the kernel or the Jupyter server run under the user's umask (022 by default), the ranks under 077;
either way what nbtrain writes under ``NBTRAIN_HOME`` is the user's alone: directories 0700, files 0600.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["PRIVATE_DIR", "PRIVATE_FILE", "PRIVATE_UMASK", "private_dir"]

PRIVATE_DIR, PRIVATE_FILE, PRIVATE_UMASK = 0o700, 0o600, 0o077


def private_dir(path: Path) -> Path:
    """Create ``path`` and each missing parent with mode 0700 (``mkdir(parents=True)`` would give parents the
    umask's mode); an existing directory is left as it is. Returns ``path``."""
    missing = []
    for candidate in (path, *path.parents):
        if candidate.is_dir():
            break
        missing.append(candidate)
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=PRIVATE_DIR)
        except FileExistsError:
            if not directory.is_dir():
                raise
    return path
