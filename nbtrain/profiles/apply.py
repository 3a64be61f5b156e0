"""The submission edge: parsed flags (with ``--profile``) -> the Resolved spec, loading the profile asked for."""

from __future__ import annotations

import argparse
import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nbtrain.errors import SpecError
from nbtrain.flags.parse import default_spec
from nbtrain.flags.table import OPTIONS
from nbtrain.profiles.load import load_catalog
from nbtrain.profiles.model import Profile, namespace_of
from nbtrain.profiles.resolve import TOML, Resolved, resolve
from nbtrain.spec import JobSpec
from nbtrain.tomlfile import read_toml

__all__ = [
    "check_recorded_locks", "environment_sources", "job_sources", "keyword_namespace", "recorded_profile", "resolve_args",
    "toml_sources",
]


def environment_sources() -> dict[str, str]:
    """field -> ``environment NAME`` for the defaults the environment changes (NBTRAIN_BACKEND...)."""
    return {o.field: f"environment {o.env}" for o in OPTIONS
            if o.field and o.env and os.environ.get(o.env, "").strip()}


def toml_sources(data: Mapping[str, object]) -> dict[str, str]:
    """field -> ``nbtrain.toml`` for every job option an nbtrain.toml document (parsed) sets."""
    sources = {}
    for option in OPTIONS:
        if option.field and option.toml:
            table, key = option.toml.split(".")
            section = data.get(table)
            if isinstance(section, Mapping) and key in section:
                sources[option.field] = TOML
    return sources


def job_sources(path: Path) -> dict[str, str]:
    """:func:`toml_sources` of the nbtrain.toml at ``path`` (already read and checked by ``load_job``)."""
    return toml_sources(read_toml(path))


def resolve_args(args: argparse.Namespace, *, base: JobSpec | None = None,
                 base_sources: Mapping[str, str] | None = None, project_toml: Path | None = None) -> Resolved:
    """The spec of parsed flags: ``base`` (default: the defaults and the environment's), the profile named by
    ``args.profile`` (looked up in every source, ``project_toml`` for the project's), then the typed flags.

    A job directory's nbtrain.toml (``project_toml``, with ``base`` its spec: ``nbtrain submit DIR``) may record the
    profile its cell used (``[source] profile = "NAME VERSION"``). Without ``--profile`` that profile's *locks*
    hold again (its other values stay as nbtrain.toml has them): the installed profile must be that version, and
    neither nbtrain.toml nor a flag may differ from a locked value. ``--profile NAME`` submits under NAME instead.

    Raises SpecError for an unknown profile (listing the known ones), a recorded profile not installed or of
    another version (naming both), a flag or nbtrain.toml value changing a locked value, bad values.
    """
    name = getattr(args, "profile", None)
    catalog = load_catalog(project_toml)
    profile = catalog.get(name) if name else None
    if base is None:
        base, base_sources = default_spec(), environment_sources()
    recorded = recorded_profile(project_toml) if project_toml is not None and not name else None
    if recorded and project_toml is not None:
        return _with_recorded_locks(base, args, recorded, catalog.profiles, base_sources, project_toml)
    return resolve(base, args, profile, base_sources)


def keyword_namespace(options: Mapping[str, Any], where: str) -> argparse.Namespace:
    """A Namespace as if the keyword ``options`` of the function form (``@nbtrain.distributed(gpus=2, ...)``) had been
    typed as flags, for :func:`resolve_args`: the magic's and the CLI's one path (environment, profile, locks).

    A key is a flag's name with underscores (``gpus=2``, ``max_restarts=1``, ``no_tracking=True``,
    ``env={"A": "1"}``) or a JobSpec field (``procs_per_node=2``, ``timeout_s=60``, ``tracking=False``);
    ``profile="NAME"`` is ``--profile NAME``. Values take the types nbtrain.toml gives them (a tuple works as a
    list). Raises SpecError starting with ``where`` for an unknown key (naming close matches) or a wrong type.
    """
    by_flag = {o.flag[2:].replace("-", "_"): o for o in OPTIONS if o.field is not None}
    by_field = {o.field: o for o in OPTIONS if o.field is not None}
    values: dict[str, Any] = {}
    profile = None
    for key, value in options.items():
        if key == "profile":
            profile = value
            continue
        option = by_flag.get(key)
        if option is None and key in by_field:  # a JobSpec field: a switch's field may mean the flag's opposite
            option = by_field[key]
            if option.kind == "switch" and isinstance(value, bool):
                value = value != option.default
        if option is None:
            close = difflib.get_close_matches(key, [*by_flag, "profile"], n=2)
            hint = f" Did you mean {' or '.join(close)}?" if close else ""
            raise SpecError(f"{where}: unknown option {key!r}.{hint} Options are the flags of %%distributed with "
                            "underscores (gpus=2, max_restarts=1, no_tracking=True) or JobSpec fields; docs/options.md "
                            "lists them.")
        values[option.flag] = list(value) if isinstance(value, tuple) else value
    namespace = namespace_of(values, where)
    if profile is not None:
        if not isinstance(profile, str):
            raise SpecError(f"{where}: profile={profile!r}: give the profile's name as a string, e.g. profile=\"team\".")
        namespace.profile = profile
    return namespace


def recorded_profile(path: Path) -> str | None:
    """The profile a job directory's nbtrain.toml records (``"NAME VERSION"``, ``[source] profile``), if any."""
    try:
        source = read_toml(path).get("source")
    except (OSError, SpecError):
        return None  # not a job directory's file (load_job reports a broken one)
    value = source.get("profile") if isinstance(source, Mapping) else None
    return value.strip() if isinstance(value, str) and value.strip() else None


def _with_recorded_locks(base: JobSpec, args: argparse.Namespace, recorded: str, profiles: Mapping[str, Profile],
                         base_sources: Mapping[str, str] | None, toml: Path) -> Resolved:
    from nbtrain.profiles.locks import installed_profile, lock_mismatches, locks_only

    where = f"{toml} ([source] profile = {recorded!r})"
    profile = installed_profile(recorded, profiles, where)
    mismatches = lock_mismatches(profile, base)
    if mismatches:
        raise SpecError(f"{toml}: " + "; ".join(m.describe(profile) for m in mismatches)
                        + f"; nothing was started. Put the locked value back in {toml.name} (or export the job "
                        f"again); to change it ask {profile.who_to_ask()}.")
    resolved = resolve(base, args, locks_only(profile), base_sources)
    return Resolved(resolved.spec, resolved.sources, profile)


def check_recorded_locks(recorded: str, before: JobSpec, after: JobSpec) -> None:
    """The locks of the profile a run started from (``recorded``: ``"NAME VERSION"``, from its record) hold for a
    rerun with overrides (``%nbtrain rerun RUN --strategy …``, ``nbtrain debug``): SpecError when ``after``
    changes a locked value. The recorded spec was checked when the run started, so an unchanged rerun needs no
    check; a changed one needs the profile installed in that version (the one policy:
    :func:`nbtrain.profiles.locks.installed_profile`)."""
    from nbtrain.profiles.load import load_catalog
    from nbtrain.profiles.locks import check_locks, installed_profile

    changed = [o.flag for o in OPTIONS if o.field and getattr(after, o.field) != getattr(before, o.field)]
    if not changed:
        return
    profile = installed_profile(recorded, load_catalog().profiles, ", ".join(changed),
                                started="this run started from")
    check_locks(profile, before, after)
