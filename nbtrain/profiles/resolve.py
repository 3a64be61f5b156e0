"""A job's spec from its layers, and where each value came from (pure).

Precedence, lowest first::

    built-in defaults (and NBTRAIN_BACKEND)  <  nbtrain.toml of the job  <  --profile NAME  <  flags

A profile is picked per submission, so it beats the job directory's nbtrain.toml (which ``nbtrain export``
writes with every value, defaults included: below the profile, it would mask all of it); flags beat both. A
value the profile *locks* beats everything: a flag that changes it is refused (:func:`resolve` raises before
anything starts), and the nbtrain.toml value under it is replaced, as any profile value replaces it.
NAME=VALUE options (``--env``...) merge layer over layer, as flags already merge into nbtrain.toml's.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass

from nbtrain.flags.parse import given_options, spec_from_namespace
from nbtrain.flags.support import _shown
from nbtrain.flags.table import OPTIONS
from nbtrain.profiles.locks import check_locks
from nbtrain.profiles.model import Profile, namespace_of
from nbtrain.spec import JobSpec

__all__ = ["DEFAULT", "FLAG", "TOML", "Resolved", "render_sources", "resolve"]

DEFAULT, TOML, FLAG = "default", "nbtrain.toml", "flag"


@dataclass(frozen=True)
class Resolved:
    """The spec a submission runs, and ``sources``: flag -> where its value came from (every job option)."""

    spec: JobSpec
    sources: Mapping[str, str]
    profile: Profile | None = None


def resolve(base: JobSpec, args: argparse.Namespace, profile: Profile | None = None,
            base_sources: Mapping[str, str] | None = None) -> Resolved:
    """``base`` (defaults or nbtrain.toml) with ``profile``'s values, then the flags typed in ``args``.

    ``base_sources``: field -> source of ``base``'s values that are not defaults (e.g. ``"nbtrain.toml"``,
    ``"environment NBTRAIN_BACKEND"``). Raises SpecError, before anything starts, when a flag changes a value
    the profile locks (naming the profile, its version and file, the option, the locked value and whom to ask),
    and for bad values (naming the flag).
    """
    with_profile = base
    if profile is not None:
        with_profile = spec_from_namespace(namespace_of(profile.values, f"profile {profile.name!r}"), base=base)
    spec = spec_from_namespace(args, base=with_profile)
    given = {o.flag for o in given_options(args)}
    if profile is not None:
        check_locks(profile, with_profile, spec, given)
    sources = {}
    for option in OPTIONS:
        if option.field is None:
            continue
        if option.flag in given:
            sources[option.flag] = FLAG
        elif profile is not None and option.flag in profile.values:
            lock = ", locked" if option.flag in profile.locked else ""
            sources[option.flag] = f"profile {profile.label}{lock}"
        else:
            sources[option.flag] = (base_sources or {}).get(option.field, DEFAULT)
    return Resolved(spec, sources, profile)


def render_sources(resolved: Resolved) -> str:
    """The ``--dry-run`` table "Where each value came from": one line per option not at its default, then a count."""
    rows = []
    for option in OPTIONS:
        if option.field is None:
            continue
        source = resolved.sources.get(option.flag, DEFAULT)
        if source == DEFAULT:
            continue
        value = getattr(resolved.spec, option.field)
        if option.kind == "switch":  # the flag alone says it is on
            shown = "" if value != option.default else "(off)"
        else:
            shown = _shown(value) or "(empty)"
        rows.append((option.flag, shown, source))
    width = max((len(f"{f} {v}".strip()) for f, v, _ in rows), default=0)
    lines = ["Where each value came from (default < nbtrain.toml < profile < flag; locked profile values win):"]
    lines += [f"  {(flag + ' ' + value).strip().ljust(width)}  {source}" for flag, value, source in rows]
    others = sum(1 for o in OPTIONS if o.field is not None) - len(rows)
    lines.append(f"  the {others} other options: default")
    return "\n".join(lines)
