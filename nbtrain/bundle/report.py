"""Plain-text dry-run report of a bundle (what ships, how, and how big)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model import Bundle, CapturedName

__all__ = ["format_report", "human_size", "kind_summary"]

_KIND_WORDS = {
    "import": ("import", "imports"),
    "literal": ("literal", "literals"),
    "source": ("definition", "definitions"),
    "pickle": ("pickled object", "pickled objects"),
}


def human_size(size: int) -> str:
    """``1536`` -> ``"1.5 KB"`` (powers of 1024, like ``--max-capture-mb``)."""
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def kind_summary(captured: tuple[CapturedName, ...] | list[CapturedName]) -> str:
    """``"3 imports, 2 definitions, 1 literal, 1 pickled object"`` (kinds in that order)."""
    counts = Counter(str(c.kind) for c in captured)
    parts = []
    for kind in ("import", "source", "literal", "pickle"):
        n = counts.get(kind, 0)
        if n:
            singular, plural = _KIND_WORDS[kind]
            parts.append(f"{n} {singular if n == 1 else plural}")
    return ", ".join(parts) or "nothing from the notebook"


def format_report(bundle: Bundle) -> str:
    """Return the dry-run table for ``bundle``."""
    rows = [(c.name, str(c.kind), human_size(c.size), c.detail) for c in bundle.captured]
    header = ("name", "how", "size", "detail")
    widths = [max([len(header[i]), *(len(r[i]) for r in rows)]) for i in range(3)]
    origin = f"function {bundle.manifest.get('function')}" if bundle.manifest.get("kind") == "function" else "cell"
    lines = [f"nbtrain bundle {bundle.digest[:12]} ({origin}): {kind_summary(bundle.captured)}"]
    if rows:
        w0, w1, w2 = widths
        fmt = f"  {{:<{w0}}}  {{:<{w1}}}  {{:>{w2}}}  {{}}"
        lines.append(fmt.format(*header).rstrip())
        lines.extend(fmt.format(*row).rstrip() for row in rows)
    total = sum(len(data) for data in bundle.files.values()) + len(bundle.manifest_bytes)
    files = ", ".join(f"{rel} {human_size(len(data))}" for rel, data in sorted(bundle.files.items()))
    lines.append(f"files: {files}, manifest.json {human_size(len(bundle.manifest_bytes))}")
    lines.append(f"total: {human_size(total)}   digest: {bundle.digest}")
    return "\n".join(lines)
