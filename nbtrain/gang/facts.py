"""What the ranks of one attempt reported, as the engine keeps it (their event files read incrementally).

:class:`RankFacts` is filled by :meth:`RankFacts.take` from each rank's events (RANK_START, RANK_ERROR,
RANK_DONE, heartbeats with progress) and by the engine's PID watch (a rank whose process is gone without
reporting has *vanished*). The verdict's observation, the stall watch and the triage of the first failure all
read it; only the engine writes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbtrain.backends.local import stacks
from nbtrain.events import Event, EventKind, parse_line

__all__ = ["LAST_LINES", "RankFacts", "attempt_checkpointed"]

LAST_LINES = 40  # the last lines of a rank's log a failure shows


@dataclass
class RankFacts:
    """Per rank: its watched PID (0: not watchable from here), done, first error, vanished (when, exit code)."""

    pids: dict[int, int] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    errors: dict[int, Event] = field(default_factory=dict)
    vanished: dict[int, tuple[float, int | None]] = field(default_factory=dict)
    beats: dict[int, tuple[float, dict[str, Any]]] = field(default_factory=dict)  # rank -> (time, progress)
    final: dict[int, Event] = field(default_factory=dict)  # RANK_DONE of each finished rank (its collective count)
    rank_started: dict[int, float] = field(default_factory=dict)  # RANK_START times (idle since then)
    listeners: dict[int, stacks.Listener | None] = field(default_factory=dict)  # ranks that dump stacks on a signal

    def take(self, rank: int, event: Event, watched_pid: Callable[[int, int, Event], int]) -> None:
        """Record one event of ``rank``; ``watched_pid(rank, pid, event)`` is the PID to watch from its RANK_START."""
        if event.kind is EventKind.RANK_START:
            self.pids[rank] = watched_pid(rank, int(event.data.get("pid", 0)), event)
            self.rank_started[rank] = event.time
            self.listeners[rank] = stacks.listener(event.data)
        elif event.kind is EventKind.RANK_ERROR:
            self.errors.setdefault(rank, event)
        elif event.kind is EventKind.RANK_DONE:
            self.done.add(rank)
            self.final[rank] = event
        elif event.kind is EventKind.HEARTBEAT and "idle_s" in event.data:
            self.beats[rank] = (event.time, dict(event.data))

    def settled(self, rank: int) -> bool:
        """``rank`` has reported its end (done or an error) or was found gone."""
        return rank in self.done or rank in self.errors or rank in self.vanished


def attempt_checkpointed(events_dir: Path) -> bool:
    """Whether a rank of the attempt reported a complete checkpoint (a CHECKPOINT event in its event file)."""
    for path in events_dir.glob("rank-*.jsonl"):
        try:
            with open(path, "rb") as handle:
                if any(b'"checkpoint"' in line and (event := parse_line(line.decode(errors="replace"))) is not None
                       and event.kind is EventKind.CHECKPOINT for line in handle):
                    return True
        except OSError:
            continue
    return False
