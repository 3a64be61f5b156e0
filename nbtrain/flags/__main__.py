"""``python -m nbtrain.flags``: print or write the options reference (see :func:`nbtrain.flags.generate.main`)."""

import sys

from nbtrain.flags.generate import main

sys.exit(main())
