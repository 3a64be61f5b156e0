"""Pod log lines -> (rank, event, text) records, undoing what torchelastic's tee does to lines (pure).

torchelastic copies each worker's output to the launcher's stdout one ``readline()`` at a time, each
piece prefixed with ``[rankN]:``. A piece that did not end with a newline (output without one, or a
line read while it was being written) gets the next piece, often another rank's, glued to it:
``[rank0]:50%[rank1]:hello``. :class:`LineSplitter` splits pod log lines at those inner prefixes and
joins each rank's pieces back into whole lines, so progress output and long event lines survive.

The pod log is untrusted: the training code prints whatever its data contains. A line becomes an event
only through :func:`nbtrain.events.parse_stream_line` with the attempt's key (the marker at the start
of the line, a tag that verifies), and only if it is an event a rank of this attempt may send
(:class:`Expect`); everything else stays log text of the rank that printed it. A whole line that
verifies is an event whatever was pending for its rank, so printed text cannot swallow a genuine event.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from nbtrain.events import NOT_FROM_RANKS, Event, parse_stream_line

__all__ = ["Expect", "LineSplitter", "Record"]

_INNER_PREFIX = re.compile(r"\[(?:rank|default)[0-9]{1,9}\]:")
_PREFIX = re.compile(r"^\[(?:rank|default)?([0-9]{1,9})\]:")  # what nbtrain.events.parse_stream_line accepts
MAX_PARTIAL = 1024 * 1024  # a "line" that never ends (e.g. \r progress bars) is cut here


@dataclass(frozen=True)
class Expect:
    """What an event line of this attempt must satisfy: tagged with ``key``, from ``attempt``, by a rank
    below ``world`` whose line it is (its own ``[rankN]:`` prefix, when the line has one), of a kind a
    rank reports (not one of :data:`nbtrain.events.NOT_FROM_RANKS`). ``key=None``: nothing is an event."""

    key: bytes | None
    attempt: int
    world: int

    def __repr__(self) -> str:  # never print the key (tracebacks, debug logs)
        return f"Expect(key={'<set>' if self.key else None}, attempt={self.attempt}, world={self.world})"

    def accepts(self, event: Event, line_rank: int | None) -> bool:
        """``event`` (already authenticated) is one a rank of this attempt sends on its own stdout."""
        rank = event.rank
        return (rank is not None and 0 <= rank < self.world and event.source == f"rank-{rank}"
                and event.attempt == self.attempt and event.kind not in NOT_FROM_RANKS
                and (line_rank is None or line_rank == rank))


@dataclass(frozen=True)
class Record:
    """One unit of a pod's output: a log line of ``rank`` (None: the launcher's own) or an event."""

    rank: int | None
    text: str | None = None
    event: Event | None = None


def split_glued(line: str) -> list[str]:
    """Split ``[rank0]:a[rank1]:b`` into its prefixed pieces.

    torchelastic never writes an empty piece, so a prefix right after another one (``[rank1]:[rank0]:x``)
    is text that rank 1 printed at the start of its line, not a glue: it stays rank 1's.
    """
    first = _PREFIX.match(line)
    text_start = first.end() if first else 0
    cuts = []
    for match in _INNER_PREFIX.finditer(line):
        if match.start() > 0 and match.start() > text_start:
            cuts.append(match.start())
            text_start = match.end()
    if not cuts:
        return [line]
    bounds = [0, *cuts, len(line)]
    return [line[a:b] for a, b in itertools.pairwise(bounds)]


class LineSplitter:
    """Turns the complete lines of one pod's log into :class:`Record` s, in order. One per log stream.

    The runtime starts every event write with a newline (so its marker begins a line); the one blank line
    that leaves before an event is dropped here: a rank's blank lines are held until its next line, and
    one of them is dropped when that line is an event.
    """

    def __init__(self, expect: Expect) -> None:
        self.expect = expect
        self.partial: dict[int | None, str] = {}  # rank -> start of a line still being written
        self.blanks: dict[int | None, int] = {}  # rank -> blank lines held back (see the class docstring)

    def _event(self, line: str) -> tuple[int | None, Event | None, str]:
        rank, event, text = parse_stream_line(line, key=self.expect.key)
        if event is not None and not self.expect.accepts(event, rank):
            return rank, None, text
        return rank, event, text

    def feed(self, line: str) -> list[Record]:
        """Records for one complete pod log line (without its newline)."""
        rank, event, _ = self._event(line)
        if event is not None:  # one whole, authentic event line: what was pending for its rank was not its start
            pending = self.partial.pop(rank, "")
            return (self._emit(rank, text=pending) if pending else []) + self._emit(rank, event=event)
        text = _strip(line)[1]
        if rank in self.partial:  # the rest of a cut event line, which may itself contain "[rankN]:"
            _, joined_event, _ = self._event(self.partial[rank] + text)
            if joined_event is not None:
                del self.partial[rank]
                return self._emit(rank, event=joined_event)
        pieces = split_glued(line)
        out: list[Record] = []
        for index, piece in enumerate(pieces):
            p_rank, p_text = _strip(piece)
            joined = self.partial.pop(p_rank, "") + p_text
            if index < len(pieces) - 1 and len(joined) < MAX_PARTIAL:
                self.partial[p_rank] = joined  # not newline-terminated: the rest comes in a later piece
                continue
            out += self._whole(p_rank, joined)
        return out

    def _whole(self, rank: int | None, text: str) -> list[Record]:
        """A rank's complete line (prefix already stripped): an event if it is one, else text."""
        _, event, _ = self._event(text)
        if event is not None and rank is not None and event.rank != rank:
            event = None  # a line of one rank cannot carry another rank's event
        return self._emit(rank, event=event) if event is not None else self._emit(rank, text=text)

    def _emit(self, rank: int | None, *, text: str | None = None, event: Event | None = None) -> list[Record]:
        held = self.blanks.pop(rank, 0)
        if text == "":
            self.blanks[rank] = held + 1
            return []
        if event is not None:
            held = max(0, held - 1)  # the newline the runtime wrote before this event
            return [Record(rank, text="")] * held + [Record(event.rank, event=event)]
        return [Record(rank, text="")] * held + [Record(rank, text=text)]

    def flush(self) -> list[Record]:
        """Lines still incomplete at the end of the stream, and blank lines still held back."""
        out: list[Record] = []
        for rank, text in list(self.partial.items()):
            out += self._whole(rank, text)
        self.partial.clear()
        for rank, held in self.blanks.items():
            out += [Record(rank, text="")] * held
        self.blanks.clear()
        return out


def _strip(piece: str) -> tuple[int | None, str]:
    """(rank, text after the rank prefix) without interpreting an event marker."""
    match = _PREFIX.match(piece)
    if match is None:
        return None, piece
    return int(match.group(1)), piece[match.end():]
