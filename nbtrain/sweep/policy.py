"""The sweep's decisions (pure): which running trials to stop early (the median rule, or ASHA-like rungs:
:func:`asha_stops`), and which trial is best.

The median rule (Golovin et al., Google Vizier), as :func:`median_stops` applies it, in order:

1. only a running trial that reported the objective at a step >= ``grace_steps`` is judged;
2. its value at its latest step ``s`` is the best it reported up to ``s`` (a noisy step does not stop it);
3. the reference is every *completed* trial (it succeeded) that reported the objective at or before ``s``, each
   by its best value up to ``s``; with fewer than ``min_completed`` of them nothing is judged;
4. the trial is stopped when its value is worse (``mode``) than the median of the reference values.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from nbtrain.sweep.space import Mode

__all__ = ["StopDecision", "TrialProgress", "asha_stops", "best_trial", "median_stops"]


@dataclass(frozen=True)
class TrialProgress:
    """What the sweep knows of one trial: ``running`` now, ``completed`` (it succeeded), the objective's points."""

    index: int
    running: bool
    completed: bool
    points: tuple[tuple[int, float], ...]  # (step, value), by step


@dataclass(frozen=True)
class StopDecision:
    """Stop trial ``index``: ``reason`` says why, in words a user reads in the trial's verdict."""

    index: int
    reason: str


def _better(a: float, b: float, mode: Mode) -> bool:
    return a < b if mode is Mode.MIN else a > b


def _best_until(points: Sequence[tuple[int, float]], step: int, mode: Mode) -> float | None:
    values = [v for s, v in points if s <= step]
    if not values:
        return None
    return min(values) if mode is Mode.MIN else max(values)


def median_stops(trials: Sequence[TrialProgress], *, objective: str, mode: Mode, grace_steps: int,
                 min_completed: int = 1) -> list[StopDecision]:
    """The running trials the median rule stops now (module docstring), each with its reason."""
    completed = [t for t in trials if t.completed and t.points]
    decisions = []
    for trial in trials:
        if not trial.running or not trial.points:
            continue
        step = trial.points[-1][0]
        if step < grace_steps:
            continue
        value = _best_until(trial.points, step, mode)
        reference = [v for v in (_best_until(t.points, step, mode) for t in completed) if v is not None]
        if value is None or len(reference) < max(1, min_completed):
            continue
        median = statistics.median(reference)
        if _better(median, value, mode):
            decisions.append(StopDecision(trial.index, (
                f"objective {objective} {value:.4g} at step {step} is worse than the median {median:.4g} of "
                f"{len(reference)} completed trial{'s' if len(reference) > 1 else ''} at step {step} "
                f"({'lower' if mode is Mode.MIN else 'higher'} is better; median rule after {grace_steps} steps)")))
    return decisions


def asha_stops(trials: Sequence[TrialProgress], *, objective: str, mode: Mode, grace_steps: int,
               reduction: int = 3) -> list[StopDecision]:
    """The running trials ASHA-like rungs stop now (asynchronous successive halving, judged at the rungs).

    Rungs are at steps ``grace_steps * reduction**k``. A running trial is judged at the highest rung it has reached:
    its best value up to that step is compared with the values (each trial's best up to that step) of every trial
    that reached the rung, itself included, running, completed or stopped; with at least ``reduction`` of them,
    a trial outside the best ``ceil(n / reduction)`` is stopped.
    """
    decisions = []
    for trial in trials:
        if not trial.running or not trial.points or trial.points[-1][0] < grace_steps:
            continue
        rung = grace_steps
        while rung * reduction <= trial.points[-1][0]:
            rung *= reduction
        reached = [t for t in trials if t.points and t.points[-1][0] >= rung]
        values = sorted(v for v in (_best_until(t.points, rung, mode) for t in reached) if v is not None)
        if mode is Mode.MAX:
            values.reverse()
        value = _best_until(trial.points, rung, mode)
        if value is None or len(values) < max(2, reduction):
            continue
        kept = -(-len(values) // reduction)  # ceil
        cutoff = values[kept - 1]
        if _better(cutoff, value, mode):
            decisions.append(StopDecision(trial.index, (
                f"objective {objective} {value:.4g} at rung step {rung} is not in the best {kept} of the "
                f"{len(values)} trials that reached step {rung} (cutoff {cutoff:.4g}; "
                f"{'lower' if mode is Mode.MIN else 'higher'} is better; ASHA rungs, reduction {reduction})")))
    return decisions


def best_trial(trials: Sequence[TrialProgress], mode: Mode) -> tuple[int, float] | None:
    """The completed trial whose last reported objective is best, and that value (the first of equals); None when
    no completed trial reported it."""
    best: tuple[int, float] | None = None
    for trial in trials:
        if trial.completed and trial.points:
            value = trial.points[-1][1]
            if best is None or _better(value, best[1], mode):
                best = (trial.index, value)
    return best
