"""What ``%nbtrain gangs`` / ``%nbtrain gang stop`` and ``nbtrain gangs`` do: list and stop warm gangs."""

from __future__ import annotations

from nbtrain.store import Store
from nbtrain.warm import registry

__all__ = ["gangs_table", "stop_gangs"]


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def gangs_table(store: Store) -> str:
    """The warm gangs of ``store`` as a table: id, backend, shape, state, idle time, memory, the latest generation
    (one per run attempt) and why the latest recycled generation was recycled."""
    gangs = registry.list_gangs(store)
    if not gangs:
        return "no warm gangs: a %%distributed --warm cell starts one"
    head = ("GANG", "BACKEND", "SHAPE", "STATE", "IDLE", "MEMORY", "GENERATION", "LAST RECYCLE")
    rows = [head] + [(g.id, g.backend, g.shape, g.state, _age(g.idle_s), f"{g.rss_mb:.0f} MB", str(g.generation),
                      g.last_recycle or "-") for g in gangs]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def stop_gangs(store: Store, gang_id: str | None = None) -> list[str]:
    """Stop the gang ``gang_id`` (a unique prefix), or every gang of the store; one line per gang stopped."""
    targets = [registry.find_gang(store, gang_id)] if gang_id else [g.directory for g in registry.list_gangs(store)]
    lines = []
    for directory in targets:
        killed = registry.stop_gang(directory)
        lines.append(f"{directory.name}: stopped" + (f" ({killed} process(es) had to be killed)" if killed else ""))
    return lines or ["no warm gangs to stop"]
