"""Sweeps: one job run once per trial over a grid or random space of its parameters, at most ``--concurrency``
trials at a time, laggards stopped early (median rule), the best trial named; each trial an ordinary run.

- :mod:`.space`: the sweep's options -> :class:`SweepSpec` -> trials (pure);
- :mod:`.policy`: the early-stop rule and the best trial (pure);
- :mod:`.record`: the sweep record in the store;
- :mod:`.supervisor`: the detached process that runs a sweep (submit, watch, stop, MLflow parent);
- :mod:`.start`, :mod:`.handle`: starting one, and the :class:`Sweep` handle (``attach_sweep`` after a restart).
"""

from __future__ import annotations

from nbtrain.sweep.handle import Sweep, attach_sweep
from nbtrain.sweep.options import sweep_from_namespace
from nbtrain.sweep.space import SweepSpec

__all__ = ["Sweep", "SweepSpec", "attach_sweep", "sweep_from_namespace"]
