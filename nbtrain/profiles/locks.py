"""Profile locks, in one place (pure): does a spec keep what a profile locks, and is a recorded profile installed?

One comparison (:func:`differing`) serves every route a value takes: a flag typed under ``--profile``
(:func:`nbtrain.profiles.resolve.resolve`), a rerun's overrides (:func:`check_locks`), an exported job's
nbtrain.toml at ``nbtrain submit JOBDIR`` and at ``nbtrain validate JOBDIR --profile NAME`` (a platform team's CI
gate: :func:`lock_mismatches`). One policy for a recorded profile that is not installed in that version
(:func:`installed_profile`): its locks cannot be checked, so what needs them checked is refused.

Routes around a lock that do not go through the option are closed where they start, for every value and not only
locked ones: an ``--sbatch`` key that sbatch would read as ``--partition`` (any abbreviation) is refused by
:func:`nbtrain.spec.sbatch_lines`, a ``--pod-template`` that sets ``serviceAccountName`` by
:mod:`nbtrain.backends.kubernetes.override`; ``--sbatch`` options that set one thing between them (``mem``,
``mem-per-cpu``) count as one here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from nbtrain.backends.slurm.sbatchopts import setting as sbatch_setting
from nbtrain.errors import SpecError
from nbtrain.flags.parse import spec_from_namespace
from nbtrain.flags.support import _shown
from nbtrain.flags.table import OPTIONS, Option
from nbtrain.profiles.model import Profile, namespace_of
from nbtrain.secrets import redact_env
from nbtrain.spec import JobSpec, sbatch_lines

__all__ = ["LockMismatch", "check_locks", "differing", "installed_profile", "lock_mismatches", "locked_error",
           "locks_only"]


@dataclass(frozen=True)
class LockMismatch:
    """A locked option whose value in a job differs: ``flag``, the job's value and the locked one, both as text
    (NAME=VALUE options show only the names the profile locks, secret-looking values masked)."""

    flag: str
    value: str
    locked: str

    def describe(self, profile: Profile) -> str:
        """``--strategy is fsdp; profile 'team' 2.1 (/etc/team.toml) locks it to ddp``."""
        return (f"{self.flag} is {self.value or '(off)'}; profile {profile.name!r} {profile.version} "
                f"({profile.source}) locks it to {self.locked or '(off)'}")


def _text(value: Any, option: Option) -> str:
    if option.kind == "switch":  # as the flag says it: --no-tracking is "on" when tracking is off
        return "on" if value != option.default else "off"
    return _shown(value) or "(none)"


def _pairs(values: Mapping[str, Any], names: list[str]) -> str:
    shown = redact_env({k: str(values[k]) for k in names if k in values})
    return " ".join(f"{k}={shown[k]}" if k in shown else f"{k} unset" for k in names)


def _setting(option: Option, name: str) -> str:
    """The setting a NAME=VALUE pair of ``option`` sets: its name, but for ``--sbatch``, where several sbatch options
    set one thing (``mem``, ``mem-per-cpu``: :func:`nbtrain.backends.slurm.sbatchopts.setting`)."""
    return sbatch_setting(name) if option.field == "sbatch_options" else name


def _pairs_met(option: Option, have: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    """Each locked pair is in ``have``, and no other name of ``have`` sets what a locked one sets."""
    if any(have.get(k) != v for k, v in want.items()):
        return False
    locked = {_setting(option, str(k)): k for k in want}
    return all(locked.get(_setting(option, str(k)), k) == k for k in have)


def differing(profile: Profile, locked: JobSpec, spec: JobSpec, *, flags: Collection[str] | None = None,
              exact: bool = True) -> list[tuple[Option, Any, Any]]:
    """THE lock comparison: ``(option, value in spec, value in locked)`` of every option ``profile`` locks (only
    those in ``flags``, when given) whose value in ``spec`` is not the one ``locked`` holds, in table order.

    Values must be equal; a NAME=VALUE option with ``exact=False`` (a job's own file, which may add names beside
    the profile's) is met when ``spec`` has each locked pair and no other name that sets the same thing (an
    ``--sbatch`` ``mem=`` beside a locked ``mem-per-cpu=``: sbatch's later line would win).
    """
    found = []
    for option in OPTIONS:
        if option.field is None or option.flag not in profile.locked or (flags is not None and option.flag not in flags):
            continue
        have, want = getattr(spec, option.field), getattr(locked, option.field)
        if isinstance(want, Mapping) and not exact:  # ``want`` holds the job's other names too: only the locked ones
            names = _canonical(option, [str(k) for k in profile.values[option.flag]])
            if _pairs_met(option, have, {k: v for k, v in want.items() if k in names}):
                continue
        elif have == want:
            continue
        found.append((option, have, want))
    return found


def _canonical(option: Option, names: list[str]) -> list[str]:
    if option.field != "sbatch_options":
        return names
    return list(sbatch_lines(dict.fromkeys(names, "")))


def lock_mismatches(profile: Profile, spec: JobSpec) -> list[LockMismatch]:
    """Every option ``profile`` locks whose value in ``spec`` (a job's own file: nbtrain.toml) differs from the
    locked value, in table order (:func:`differing`, ``exact=False``)."""
    where = f"profile {profile.name!r} ({profile.source})"
    locked = spec_from_namespace(namespace_of({f: profile.values[f] for f in profile.locked}, where), base=spec)
    found = []
    for option, have, want in differing(profile, locked, spec, exact=False):
        if isinstance(want, Mapping):  # only the names the profile locks, and those that set the same
            names = _canonical(option, [str(k) for k in profile.values[option.flag]])
            settings = {_setting(option, n) for n in names}
            wanted = {k: v for k, v in want.items() if k in names}
            names += [str(k) for k in have if str(k) not in names and _setting(option, str(k)) in settings]
            found.append(LockMismatch(option.flag, _pairs(have, names), _pairs(wanted, names)))
            continue
        found.append(LockMismatch(option.flag, _text(have, option), _text(want, option)))
    return found


def locked_error(profile: Profile, flag: str, typed: Any, locked: Any) -> SpecError:
    """The refusal of a flag or override that changes a value ``profile`` locks (naming the profile, its version and
    file, the option, both values and whom to ask)."""
    key = flag[2:]
    return SpecError(
        f"{flag} {_shown(typed) or typed}: profile {profile.name!r} (version {profile.version}, {profile.source}) "
        f"locks {key} to {_shown(locked) or locked}; nothing was started. Drop {flag} (or pick another profile); "
        f"to change the locked value ask {profile.who_to_ask()}."
    )


def check_locks(profile: Profile, before: JobSpec, after: JobSpec, flags: Collection[str] | None = None) -> None:
    """Raise :func:`locked_error` when ``after`` (a spec with flags or overrides: ``flags`` typed, a rerun,
    ``nbtrain debug``) changes a value ``profile`` locks in ``before`` (the spec the locks hold in)."""
    for option, changed, locked in differing(profile, before, after, flags=flags):
        raise locked_error(profile, option.flag, changed, locked)


def locks_only(profile: Profile) -> Profile:
    """``profile`` with only its locked values: re-applied to a job it was exported from, it enforces the locks and
    leaves the job's other values (nbtrain.toml, possibly edited since) as they are."""
    return Profile(name=profile.name, version=profile.version, description=profile.description,
                   values={f: v for f, v in profile.values.items() if f in profile.locked}, locked=profile.locked,
                   source=profile.source, docs=profile.docs, contact=profile.contact, origin=profile.origin)


def installed_profile(recorded: str, profiles: Mapping[str, Profile], where: str, *,
                      started: str = "the job was exported from") -> Profile:
    """The installed profile a job or run recorded (``recorded``: ``"NAME VERSION"``), when it is that version.

    THE policy for a recorded profile that is missing: its locks cannot be checked, so whatever needs them checked
    is refused (an exported job's nbtrain.toml always does: anyone may have edited it; a rerun does when it changes
    an option). SpecError starting with ``where`` when no profile of that name is installed, or the installed one
    has another version, naming both versions and what to do (``started``: how the job or run came from it).
    """
    name, _, version = recorded.partition(" ")
    profile = profiles.get(name)
    if profile is None:
        known = ", ".join(sorted(profiles)) or "none"
        raise SpecError(f"{where}: {started} profile {name!r} version {version or '?'}, which is not "
                        f"installed here (installed profiles: {known}); its locks cannot be checked, so nothing was "
                        f"started. Install the package or file that provides {name!r}, or pass --profile NAME to "
                        "submit it under another profile.")
    if profile.version != version:
        raise SpecError(f"{where}: {started} profile {name!r} version {version or '?'}, but the "
                        f"installed {name!r} is version {profile.version} ({profile.source}); its locks cannot be "
                        f"checked, so nothing was started. Export the job again under version {profile.version}, "
                        f"install version {version or '?'}, or pass --profile {name} to submit it under the installed "
                        "version.")
    return profile
