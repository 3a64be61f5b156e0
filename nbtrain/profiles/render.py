"""Profiles as text: the ``nbtrain templates list`` table and ``show``'s page (pure)."""

from __future__ import annotations

import json
from typing import Any

from nbtrain.profiles.load import Catalog
from nbtrain.profiles.model import Profile

__all__ = ["catalog_table", "profile_json", "profile_page"]


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def catalog_table(catalog: Catalog) -> str:
    """One line per profile (name, version, where from, description), then shadowed names and broken sources."""
    rows = [(p.name, p.version, p.origin or "?", p.description) for p in sorted(catalog.profiles.values(),
                                                                              key=lambda p: p.name)]
    if not rows:
        lines = ["no profiles found"]
    else:
        widths = [max(len(r[i]) for r in [("NAME", "VERSION", "FROM", ""), *rows]) for i in range(3)]
        lines = [f"{r[0].ljust(widths[0])}  {r[1].ljust(widths[1])}  {r[2].ljust(widths[2])}  {r[3]}".rstrip()
                 for r in [("NAME", "VERSION", "FROM", "DESCRIPTION"), *rows]]
    lines += [f"note: {hidden.name} {hidden.version} of {hidden.source} is shadowed by {by.source}"
              for hidden, by in catalog.shadowed]
    lines += [f"error: {problem}" for problem in catalog.problems]
    lines.append("Use one with %%distributed --profile NAME or nbtrain submit DIR --profile NAME; "
                 "nbtrain templates show NAME for its options.")
    return "\n".join(lines)


def profile_page(profile: Profile) -> str:
    """Everything about one profile: where it comes from, its options (locked ones marked), its docs."""
    lines = [f"{profile.name} {profile.version}: {profile.description}".rstrip(": "), f"  from: {profile.source}"]
    if profile.contact:
        lines.append(f"  contact: {profile.contact}")
    lines.append("  options (locked: users cannot override them):" if profile.locked else "  options:")
    width = max((len(flag) for flag in profile.values), default=0)
    for flag, value in profile.values.items():
        lines.append(f"    {flag.ljust(width)}  {_value(value)}{'  (locked)' if flag in profile.locked else ''}")
    if profile.docs.strip():
        lines += ["", profile.docs.strip()]
    return "\n".join(lines)


def profile_json(profile: Profile) -> dict[str, Any]:
    """The profile as JSON (``--json``): options keyed by flag, locked as a sorted list."""
    return {"name": profile.name, "version": profile.version, "description": profile.description,
            "source": profile.source, "origin": profile.origin, "contact": profile.contact,
            "options": dict(profile.values), "locked": sorted(profile.locked), "docs": profile.docs}
