"""Does a job meet a profile's locks, and is the profile a job recorded still the one installed? (pure)

Two callers ask: ``nbtrain validate JOBDIR --profile NAME`` (a platform team's CI checks an exported job against
its approved profile) and ``nbtrain submit JOBDIR`` of a job exported from a ``%%distributed --profile NAME``
cell (the job's nbtrain.toml records ``[source] profile = "NAME VERSION"``; the locks hold again at submission).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nbtrain.errors import SpecError
from nbtrain.flags.parse import spec_from_namespace
from nbtrain.flags.support import _shown
from nbtrain.flags.table import OPTIONS, Option
from nbtrain.profiles.model import Profile, namespace_of
from nbtrain.secrets import redact_env
from nbtrain.spec import JobSpec

__all__ = ["LockMismatch", "installed_profile", "lock_mismatches", "locks_only"]


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


def lock_mismatches(profile: Profile, spec: JobSpec) -> list[LockMismatch]:
    """Every option ``profile`` locks whose value in ``spec`` differs from the locked value, in table order.

    A locked NAME=VALUE option (``env``) is met when ``spec`` has each locked pair (other names may be added
    beside them, as nbtrain.toml adds to a profile's env when it is applied).
    """
    where = f"profile {profile.name!r} ({profile.source})"
    locked = spec_from_namespace(namespace_of({f: profile.values[f] for f in profile.locked}, where), base=spec)
    found = []
    for option in OPTIONS:
        if option.field is None or option.flag not in profile.locked:
            continue
        have, want = getattr(spec, option.field), getattr(locked, option.field)
        if have == want:
            continue
        if isinstance(want, Mapping):  # only the names the profile locks
            names = [str(k) for k in profile.values[option.flag]]
            found.append(LockMismatch(option.flag, _pairs(have, names), _pairs(want, names)))
            continue
        found.append(LockMismatch(option.flag, _text(have, option), _text(want, option)))
    return found


def locks_only(profile: Profile) -> Profile:
    """``profile`` with only its locked values: re-applied to a job it was exported from, it enforces the locks and
    leaves the job's other values (nbtrain.toml, possibly edited since) as they are."""
    return Profile(name=profile.name, version=profile.version, description=profile.description,
                   values={f: v for f, v in profile.values.items() if f in profile.locked}, locked=profile.locked,
                   source=profile.source, docs=profile.docs, contact=profile.contact, origin=profile.origin)


def installed_profile(recorded: str, profiles: Mapping[str, Profile], where: str) -> Profile:
    """The installed profile a job recorded (``recorded``: ``"NAME VERSION"``), when it is that version.

    SpecError starting with ``where`` (the job's nbtrain.toml) when no profile of that name is installed, or the
    installed one has another version, naming both versions and what to do.
    """
    name, _, version = recorded.partition(" ")
    profile = profiles.get(name)
    if profile is None:
        known = ", ".join(sorted(profiles)) or "none"
        raise SpecError(f"{where}: the job was exported from profile {name!r} version {version or '?'}, which is not "
                        f"installed here (installed profiles: {known}); its locks cannot be checked, so nothing was "
                        f"started. Install the package or file that provides {name!r}, or pass --profile NAME to "
                        "submit it under another profile.")
    if profile.version != version:
        raise SpecError(f"{where}: the job was exported from profile {name!r} version {version or '?'}, but the "
                        f"installed {name!r} is version {profile.version} ({profile.source}); nothing was started. "
                        f"Export the job again under version {profile.version}, install version {version or '?'}, or "
                        f"pass --profile {name} to submit it under the installed version.")
    return profile
