"""The sweep options of the options table (``--sweep``, ``--sweep-param``, ...) read from parsed flags (pure)."""

from __future__ import annotations

import argparse

from nbtrain.sweep.space import SweepSpec, parse_sweep

__all__ = ["SWEEP_DESTS", "sweep_from_namespace", "sweep_given"]

#: The argparse destinations of the sweep options (their rows in nbtrain/flags/table.py).
SWEEP_DESTS = ("sweep", "sweep_param", "trials", "seed", "objective", "objective_mode", "concurrency", "early_stop",
               "grace_steps")


def sweep_given(ns: argparse.Namespace) -> list[str]:
    """The sweep options typed in ``ns``, as flags (``--sweep-param``); empty: not a sweep."""
    given = [dest for dest in SWEEP_DESTS if getattr(ns, dest, None) is not None and getattr(ns, dest) != []]
    return [f"--{dest.replace('_', '-')}" for dest in given]


def sweep_from_namespace(ns: argparse.Namespace) -> SweepSpec | None:
    """The SweepSpec of the sweep options in ``ns``; None when none was typed. SpecError names a bad option."""
    if not sweep_given(ns):
        return None
    return parse_sweep(sweep=ns.sweep, params=list(ns.sweep_param or []), trials=ns.trials, seed=ns.seed,
                       objective=ns.objective, objective_mode=ns.objective_mode, concurrency=ns.concurrency,
                       early_stop=ns.early_stop, grace_steps=ns.grace_steps)
