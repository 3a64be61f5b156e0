"""Pod log lines -> (rank, event, text) records, undoing what torchelastic's tee does to lines (pure).

torchelastic copies each worker's output to the launcher's stdout one ``readline()`` at a time, each
piece prefixed with ``[rankN]:``. A piece that did not end with a newline (output without one, or a
line read while it was being written) gets the next piece, often another rank's, glued to it:
``[rank0]:50%[rank1]:hello``. :class:`LineSplitter` splits pod log lines at those inner prefixes and
joins each rank's pieces back into whole lines, so progress output and long event lines survive.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from nbtrain.events import Event, parse_stream_line

__all__ = ["LineSplitter", "Record"]

_INNER_PREFIX = re.compile(r"\[(?:rank|default)\d+\]:")
_PREFIX = re.compile(r"^\[(?:rank|default)?(\d+)\]:")  # what nbtrain.events.parse_stream_line accepts
MAX_PARTIAL = 1024 * 1024  # a "line" that never ends (e.g. \r progress bars) is cut here


@dataclass(frozen=True)
class Record:
    """One unit of a pod's output: a log line of ``rank`` (None: the launcher's own) or an event."""

    rank: int | None
    text: str | None = None
    event: Event | None = None


def split_glued(line: str) -> list[str]:
    """Split ``[rank0]:a[rank1]:b`` into its prefixed pieces."""
    cuts = [m.start() for m in _INNER_PREFIX.finditer(line) if m.start() > 0]
    if not cuts:
        return [line]
    bounds = [0, *cuts, len(line)]
    return [line[a:b] for a, b in itertools.pairwise(bounds)]


class LineSplitter:
    """Turns the complete lines of one pod's log into :class:`Record` s, in order. One per log stream."""

    def __init__(self) -> None:
        self.partial: dict[int | None, str] = {}  # rank -> start of a line still being written

    def feed(self, line: str) -> list[Record]:
        """Records for one complete pod log line (without its newline)."""
        rank, event, before = parse_stream_line(line)
        if event is not None and rank not in self.partial:
            return self._records(rank, before, event)  # the common case: one whole event line
        text = _strip(line)[1]
        if rank in self.partial:  # the rest of a cut event line, which may itself contain "[rankN]:"
            _, joined_event, before = parse_stream_line(self.partial[rank] + text)
            if joined_event is not None:
                del self.partial[rank]
                return self._records(rank, before, joined_event)
        pieces = split_glued(line) if event is None else [line]
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
        _, event, before = parse_stream_line(text)
        return self._records(rank, before, event) if event is not None else [Record(rank, text=text)]

    @staticmethod
    def _records(rank: int | None, text: str, event: Event | None) -> list[Record]:
        out = [Record(rank, text=text)] if text else []
        if event is not None:
            out.append(Record(event.rank if event.rank is not None else rank, event=event))
        return out

    def flush(self) -> list[Record]:
        """Lines still incomplete at the end of the stream."""
        out: list[Record] = []
        for rank, text in self.partial.items():
            out += self._whole(rank, text)
        self.partial.clear()
        return out


def _strip(piece: str) -> tuple[int | None, str]:
    """(rank, text after the rank prefix) without interpreting an event marker."""
    match = _PREFIX.match(piece)
    if match is None:
        return None, piece
    return int(match.group(1)), piece[match.end():]
