"""Why a warm generation's ranks were recycled, in the words the monitor and ``%nbtrain gangs`` show (pure).

A generation whose ranks all finished cleanly, with nothing left running in their sessions, hands the gang back
as it found it. Anything else is a **recycle**: the ranks (and what they started) are killed, and the next run's
ranks are new processes forked from the agents. The reason names the first failure as triage chose it ("rank 1
raised ValueError", "rank 0 died (SIGKILL)"), a cancel, or what the post-run check found ("leaked 2 processes
(DataLoader workers?)").
"""

from __future__ import annotations

from nbtrain.model import Failure, RunState

__all__ = ["REASON_MAX", "recycle_reason"]

REASON_MAX = 160


def _failure_words(failure: Failure) -> str:
    if failure.rank is None:
        return failure.reason
    if failure.exc_type:
        return f"rank {failure.rank} raised {failure.exc_type}"
    if failure.signal:
        return f"rank {failure.rank} died ({failure.signal})"
    if failure.exit_code is not None:
        return f"rank {failure.rank} exited with code {failure.exit_code}"
    if failure.reason.startswith(("hung", "stalled")):
        return failure.reason
    return f"rank {failure.rank} failed: {failure.reason}"


def recycle_reason(state: RunState, failure: Failure | None, *, leaked: int = 0, cancel: str = "",
                   stopped: bool = False) -> str | None:
    """Why the generation of a run that ended in ``state`` was recycled; None when it was not.

    ``failure``: the verdict's first failure (FAILED); ``leaked``: processes found in the ranks' sessions after
    the ranks exited (DataLoader workers, subprocesses); ``cancel``: what ended a CANCELLED run ("" for a plain
    cancel; a Stop that reached no step boundary in time says so); ``stopped``: every rank stopped cleanly at a
    step boundary (a cooperative Stop): then, as after a success, only leaked processes recycle it.
    """
    if state is RunState.SUCCEEDED or (state is RunState.CANCELLED and stopped):
        if not leaked:
            return None
        why = f"leaked {leaked} process{'es' if leaked > 1 else ''} (DataLoader workers?)"
    elif state is RunState.CANCELLED:
        why = cancel or "cancelled"
    else:
        why = _failure_words(failure) if failure is not None else f"the run ended {state.value}"
    why = " ".join(why.split())
    return why if len(why) <= REASON_MAX else why[:REASON_MAX - 1] + "…"
