"""Reduce a metric series to a bounded number of points while keeping its shape (pure)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["decimate"]

Point = tuple[float, float]


def decimate(points: Sequence[Point], max_points: int) -> list[Point]:
    """At most ``max_points`` points of ``points`` (sorted by x): first and last kept, and per bucket the
    minimum and maximum y in x order, so spikes survive (min/max decimation).

    ``max_points`` below 4 is raised to 4. A series already short enough is returned as a list copy.
    """
    max_points = max(4, max_points)
    count = len(points)
    if count <= max_points:
        return list(points)
    buckets = (max_points - 2) // 2
    inner = points[1:-1]
    size = len(inner) / buckets
    out: list[Point] = [points[0]]
    for b in range(buckets):
        chunk = inner[int(b * size) : int((b + 1) * size)]
        if not chunk:
            continue
        low = min(chunk, key=lambda p: p[1])
        high = max(chunk, key=lambda p: p[1])
        out.extend(sorted({low, high}, key=lambda p: p[0]) if low != high else [low])
    out.append(points[-1])
    return out
