"""A bench's own store: a temporary NBTRAIN_HOME (unless one is set), removed when the bench ends."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile


def scratch_home(prefix: str) -> str:
    """``NBTRAIN_HOME`` for this bench: the one set in the environment, else a new temporary directory that is
    removed at exit (runs leave their logs, bundles and checkpoints there: hundreds of MB at large sizes)."""
    if os.environ.get("NBTRAIN_HOME"):
        return os.environ["NBTRAIN_HOME"]
    home = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, home, True)
    os.environ["NBTRAIN_HOME"] = home
    return home
