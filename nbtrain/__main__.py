"""``python -m nbtrain``: the same as the ``nbtrain`` command (see :mod:`nbtrain.cli`)."""

from __future__ import annotations

import sys

from nbtrain.cli import main

if __name__ == "__main__":
    sys.exit(main())
