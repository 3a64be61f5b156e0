"""Whether a failed attempt restarts, and who starts the next one (pure: the engine's facts in, a decision out).

The policy every engine shares (``--max-restarts``): an attempt is followed by an automatic restart only when its
verdict is FAILED, the user did not cancel, the run's budget is not spent (``attempt < restart_budget``, the
budget being the first attempt's number plus ``--max-restarts``) and the engine can place the next attempt
somewhere (:class:`Restart`, the engine's own answer: always ``IN_PLACE`` for a local or warm gang; Slurm's from
its job state and srun's output, :func:`nbtrain.backends.slurm.restarts.decide_restart`).

- ``IN_PLACE``: the supervisor that wrote the verdict starts the next attempt itself (:func:`restarts_here`), after
  a short pause in which a cancel or the scheduler ending its allocation still stops it;
- ``NEW_ALLOCATION``: the verdict says ``retrying`` and the supervisor exits; whoever next reads the run's status
  from outside (the kernel's watcher, ``attach``, the CLI) submits the next attempt through the backend's
  :meth:`nbtrain.backends.base.Backend.plan_restart`;
- ``NONE``: the verdict stands (``why_not`` says why, for the verdict's reason, when budget was left).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from nbtrain.model import RunState

__all__ = ["Restart", "RestartDecision", "restarts_here", "will_retry"]


class Restart(enum.Enum):
    """Where the next attempt runs (see the module docstring)."""

    NONE = "none"
    IN_PLACE = "in_place"
    NEW_ALLOCATION = "new_allocation"


@dataclass(frozen=True)
class RestartDecision:
    """The decision and, for ``NONE`` with budget left, why no restart (a phrase for the verdict's reason)."""

    restart: Restart
    why_not: str = ""


def will_retry(*, state: RunState, cancelled: bool, attempt: int, restart_budget: int,
               placement: Restart = Restart.IN_PLACE) -> bool:
    """A verdict ``state`` of ``attempt`` is followed by an automatic restart (the verdict says ``retrying``).

    ``cancelled``: the user asked to cancel (never restarted). ``placement``: where the engine can place the next
    attempt (``NONE``: nowhere, e.g. Slurm ended the job for a reason a new allocation would meet again).
    """
    return (state is RunState.FAILED and not cancelled and attempt < restart_budget
            and placement is not Restart.NONE)


def restarts_here(*, state: RunState, cancelled: bool, attempt: int, restart_budget: int,
                  placement: Restart = Restart.IN_PLACE) -> bool:
    """The supervisor that wrote the verdict starts the next attempt itself (a restart ``IN_PLACE``)."""
    return (will_retry(state=state, cancelled=cancelled, attempt=attempt, restart_budget=restart_budget,
                       placement=placement) and placement is Restart.IN_PLACE)
