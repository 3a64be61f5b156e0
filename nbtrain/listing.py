"""The runs table that ``nbtrain runs`` and ``%nbtrain runs`` print, from RunSummary rows (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["age", "runs_table"]


def age(seconds: float) -> str:
    """``42 s``, ``17 min``, ``3.5 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def runs_table(rows: Sequence[dict[str, Any]], *, now: float, empty: str) -> str:
    """An aligned table of RunSummary JSON rows (``RunSummary.to_json()``), newest first as given; ``empty`` when none."""
    if not rows:
        return empty
    table = [("RUN", "STATE", "BACKEND", "GANG", "STARTED")]
    table += [(str(r["id"]), str(r["state"]), str(r["backend"]), f"{r['nodes']}x{r['procs']}",
               age(max(0.0, now - float(r["created"]))) + " ago") for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table)
