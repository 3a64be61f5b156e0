"""Resume a pod's log where the copy stopped, by timestamp, across kubelet log rotation (pure).

The kubelet keeps a container's log in files it rotates (``containerLogMaxSize``/``containerLogMaxFiles``)
and serves only what it still keeps, so "the first N lines" of a log changes meaning once it rotates:
skipping N lines of what is served then drops lines that were never copied. nbtrain therefore asks for
the log with ``timestamps=true`` and remembers, per pod, the timestamp of the last line it copied and
how many lines it copied at exactly that timestamp (several lines can share one). A new stream asks
for ``sinceTime`` (that timestamp, whole seconds: what the API takes) and skips what is older, then the
remembered count of lines at the timestamp itself.

When the lines at the remembered timestamp are no longer served but later ones are, the kubelet rotated
them away before nbtrain read what followed: :class:`Resume` reports that gap (the copy goes on with the
oldest line still kept), so the mirror can say which stretch of output is lost.
"""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["Gap", "Resume", "split_timestamp"]

_STAMP = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d) ")

Stamp = tuple[int, int]  # (seconds since the epoch, nanoseconds)


def split_timestamp(line: str) -> tuple[Stamp | None, str, str]:
    """(parsed timestamp, the timestamp as written, the rest) of a ``timestamps=true`` log line.

    A line without a leading RFC 3339 timestamp (a server that ignored ``timestamps``) is (None, "", line).
    """
    match = _STAMP.match(line)
    if match is None:
        return None, "", line
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    seconds = calendar.timegm((int(year), int(month), int(day), int(hour), int(minute), int(second), 0, 0, 0))
    if zone != "Z":
        offset = int(zone[1:3]) * 3600 + int(zone[4:6]) * 60
        seconds -= offset if zone[0] == "+" else -offset
    nanos = int((fraction or "").ljust(9, "0"))
    return (seconds, nanos), line[: match.end() - 1], line[match.end():]


def _parse(text: str | None) -> Stamp | None:
    return split_timestamp(text + " ")[0] if text else None


@dataclass(frozen=True)
class Gap:
    """Lines after ``after`` (the last one copied) and before ``before`` (the oldest still kept) are lost."""

    after: str
    before: str


class Resume:
    """Decides which lines of one pod's log are new, keeping its position in ``entry`` (mirror.json's dict).

    ``entry`` keys it reads and updates: ``since`` (timestamp of the last copied line, as the server wrote it),
    ``at_since`` (lines copied at exactly that timestamp), ``lines`` (lines copied in all). An entry from an
    older nbtrain that only has ``lines`` is resumed by count, as that version did.
    """

    def __init__(self, entry: dict[str, Any]) -> None:
        self.entry = entry
        self.entry.setdefault("lines", 0)
        self.gaps: list[Gap] = []
        self._skip = 0
        self._by_count = 0
        self._index = 0
        self._last = _parse(entry.get("since"))
        self._seconds: dict[str, int] = {}  # "YYYY-MM-DDTHH:MM:SS" -> epoch seconds (lines of one second share it)

    def since_time(self) -> str | None:
        """The ``sinceTime`` for the next request (whole seconds, UTC), or None: from the start."""
        if self._last is None:
            return None
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._last[0]))

    def new_stream(self) -> None:
        """A new request starts: expect the lines at ``since`` again (they were copied already)."""
        self._skip = int(self.entry.get("at_since") or 0)
        self._index = 0
        self._by_count = int(self.entry["lines"]) if "since" not in self.entry else 0

    def _split(self, line: str) -> tuple[Stamp | None, str, str]:
        """:func:`split_timestamp`, fast for the kubelet's own form (UTC, ``Z``): a log has many lines a second."""
        space = line.find(" ", 19, 40)
        if space > 19 and line[space - 1] == "Z":
            written = line[:space]
            seconds = self._seconds.get(written[:19])
            if seconds is not None:
                fraction = written[20:-1] if written[19] == "." else ""
                if fraction.isdigit() or (not fraction and space == 20):
                    return (seconds, int(fraction.ljust(9, "0")) if fraction else 0), written, line[space + 1:]
        stamp, written, text = split_timestamp(line)
        if stamp is not None and written.endswith("Z"):
            self._seconds[written[:19]] = stamp[0]
        return stamp, written, text

    def feed(self, lines: list[str]) -> list[str]:
        """The texts (timestamps removed) of ``lines`` not copied before, in order; records them as copied."""
        fresh: list[str] = []
        entry = self.entry
        for line in lines:
            stamp, written, text = self._split(line)
            if self._by_count:  # an entry from before timestamps: skip by count, once
                self._index += 1
                if self._index <= self._by_count:
                    continue
                self._by_count = 0
            last = self._last
            if stamp is not None and last is not None:
                if stamp < last:
                    continue
                if stamp == last and self._skip > 0:
                    self._skip -= 1
                    continue
                if stamp > last and self._skip > 0:  # the lines we stopped at are no longer served
                    self.gaps.append(Gap(str(entry["since"]), written))
                    self._skip = 0
            if stamp is not None:
                if stamp == last:
                    entry["at_since"] += 1
                else:
                    entry["since"], entry["at_since"], self._last = written, 1, stamp
            fresh.append(text)
        entry["lines"] += len(fresh)
        return fresh
