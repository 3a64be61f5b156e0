"""Search a run's whole log on disk for a text, page by page (pure: the reading is the caller's ``read``).

The monitor's filter box matches only the lines the browser holds (a few thousand per rank); the REST
search (``GET /nbtrain/runs/<id>/search``) answers "where in the whole log does this appear?" by reading
every line of the chosen ranks through the backend's ``log_page`` (seek-based pages, never a whole file in
memory) and returning the matching lines with their rank and line number.

Contract of :func:`search_logs`:

- matching is a case-insensitive substring test on each line's text (as the filter box does);
- ranks are searched in the order given, each from line 0 (or from the cursor's line for the cursor's rank);
- one call returns at most ``limit`` matches and reads at most ``budget`` lines; when it stops early it
  returns ``next`` = the ``(rank, line)`` to continue from, so a client pages through any log size in
  bounded calls; ``next`` is None once every line of every rank was read;
- lines written while a search pages on are found if they lie after the cursor (logs are append-only).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nbtrain.model import LogPage

__all__ = ["READ_LINES", "SearchPage", "search_logs"]

READ_LINES = 5000  # lines per page read


@dataclass(frozen=True)
class SearchPage:
    """One answer: ``matches`` as ``(rank, line, text)``, where to go on (None: done), lines read."""

    matches: tuple[tuple[int, int, str], ...]
    next: tuple[int, int] | None
    scanned: int


def search_logs(read: Callable[[int, int, int], LogPage], ranks: Sequence[int], needle: str, *,
                start: tuple[int, int] | None = None, limit: int = 200, budget: int = 200_000) -> SearchPage:
    """Lines of ``ranks``' logs containing ``needle`` (case-insensitive), from ``start`` = ``(rank, line)`` on.

    ``read(rank, first_line, count)`` reads a page (``Backend.log_page``). Raises ValueError for an empty
    ``needle`` or a ``start`` rank not in ``ranks``.
    """
    wanted = needle.casefold()
    if not wanted.strip():
        raise ValueError("search: the text to search for is empty; give ?q=TEXT.")
    order = list(ranks)
    position = 0
    line = 0
    if start is not None:
        if start[0] not in order:
            raise ValueError(f"search: the cursor's rank {start[0]} is not one of the searched ranks {order}.")
        position, line = order.index(start[0]), max(0, start[1])
    matches: list[tuple[int, int, str]] = []
    scanned = 0
    while position < len(order):
        rank = order[position]
        if len(matches) >= limit or scanned >= budget:
            return SearchPage(tuple(matches), (rank, line), scanned)
        page = read(rank, line, min(READ_LINES, budget - scanned))
        for offset, text in enumerate(page.lines):
            if wanted in text.casefold():
                matches.append((rank, page.start + offset, text))
                if len(matches) >= limit:
                    scanned += offset + 1
                    return SearchPage(tuple(matches), (rank, page.start + offset + 1), scanned)
        scanned += len(page.lines)
        if not page.lines:  # the end of this rank's log
            position, line = position + 1, 0
        else:
            line = page.start + len(page.lines)
    return SearchPage(tuple(matches), None, scanned)
