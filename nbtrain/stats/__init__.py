"""Adoption statistics of nbtrain runs (``nbtrain stats``, ``%nbtrain stats``, ``GET /nbtrain/stats``).

- :mod:`~nbtrain.stats.model`: the input (:class:`RunFacts`) and output (:class:`Stats`) types (pure);
- :mod:`~nbtrain.stats.compute`: :func:`compute_stats` (pure);
- :mod:`~nbtrain.stats.collect`: a run store read into RunFacts (the only I/O);
- :mod:`~nbtrain.stats.render`, :mod:`~nbtrain.stats.prometheus`: text, JSON and Prometheus renderings (pure).

Definitions of every figure: docs/stats.md.
"""

from __future__ import annotations

from nbtrain.stats.compute import compute_stats
from nbtrain.stats.model import AttemptFacts, AttemptKind, RunFacts, Stats

__all__ = ["AttemptFacts", "AttemptKind", "RunFacts", "Stats", "compute_stats", "parse_since"]

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


def parse_since(text: str | None) -> float | None:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` or a number of seconds -> seconds; ``all``/empty/None -> None.

    ValueError naming the value and the accepted forms otherwise."""
    if text is None or text.strip().lower() in ("", "all"):
        return None
    raw = text.strip().lower()
    number, unit = (raw[:-1], raw[-1]) if raw[-1] in _UNITS else (raw, "s")
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"--since {text!r}: expected a duration such as 30d, 12h, 90m, 45s, 2w, a number of "
                         "seconds, or 'all'.")
    return value * _UNITS[unit]
