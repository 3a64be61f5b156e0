"""What a private store must not have: paths that other accounts may read, write or list."""

from __future__ import annotations

import stat
from pathlib import Path

__all__ = ["wide"]


def wide(root: Path) -> list[str]:
    """Every path under ``root`` (itself included, symlinks skipped) with a group or other permission bit, with its
    mode, as ``"home/runs/x 0o644"`` lines (relative to ``root``'s parent)."""
    found = []
    for path in [root, *root.rglob("*")]:
        mode = path.lstat().st_mode
        if not stat.S_ISLNK(mode) and mode & 0o077:
            found.append(f"{path.relative_to(root.parent)} {stat.filemode(mode)}")
    return found
