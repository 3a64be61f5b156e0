"""Profile: a named, versioned preset of job options, some of them locked; parsed and validated here (pure).

A profile is written in TOML, its keys the flags of the options table without their dashes::

    version = "1.0"
    description = "2 nodes x 4 GPUs, DDP, checkpoints every run"
    contact = "#ml-platform on chat"
    locked = ["strategy", "max-restarts"]

    [options]
    nodes = 2
    gpus = 4
    strategy = "ddp"
    max-restarts = 2
    env = { NCCL_DEBUG = "WARN" }

A document holds one profile (those keys at the top, its name ``name`` or the file's stem) or many
(``[profiles.NAME]`` tables, as in nbtrain.toml). Every value is checked against the table (kind, choices,
ranges: JobSpec's own rules) when it is parsed, so a bad profile fails where it is loaded, naming the option
and the file, not at submission.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nbtrain.errors import SpecError
from nbtrain.flags.parse import spec_from_namespace
from nbtrain.flags.table import OPTIONS, Option
from nbtrain.spec import JobSpec

__all__ = ["PROFILE_KEYS", "Profile", "job_option", "namespace_of", "parse_document", "parse_profile"]

#: The keys a profile may have besides its options.
PROFILE_KEYS = ("name", "version", "description", "docs", "contact", "locked", "options")
_JOB_OPTIONS: Mapping[str, Option] = {o.flag[2:]: o for o in OPTIONS if o.field is not None}


@dataclass(frozen=True)
class Profile:
    """One profile. ``values``: flag (``"--gpus"``) -> TOML value; ``locked``: flags users may not override.

    ``source`` says where it was loaded from (a file, ``package DIST (entry point NAME)``, ``built-in FILE``);
    ``contact`` is who to ask about a lock (empty: whoever maintains ``source``).
    """

    name: str
    version: str
    description: str
    values: Mapping[str, Any]
    locked: frozenset[str]
    source: str
    docs: str = ""
    contact: str = ""
    origin: str = field(default="", compare=False)  # "built-in", "package", "user", "project": the kind of source

    @property
    def label(self) -> str:
        """``multinode-ddp 1.0``: how provenance and messages name it."""
        return f"{self.name} {self.version}"

    def who_to_ask(self) -> str:
        """Whom to ask to change a lock."""
        return self.contact or f"whoever maintains {self.source}"


def job_option(key: str, where: str) -> Option:
    """The job option a profile key (``gpus``, ``--gpus``) names; SpecError naming ``where`` and close matches."""
    option = _JOB_OPTIONS.get(key.removeprefix("--"))
    if option is None:
        close = difflib.get_close_matches(key, list(_JOB_OPTIONS), n=2)
        hint = f" Did you mean {' or '.join(close)}?" if close else ""
        raise SpecError(f"{where}: unknown option {key!r}.{hint} A profile sets job options of `nbtrain submit "
                        f"--help` by their flag without the dashes, e.g. gpus = 2 (docs/options.md lists them).")
    return option


def _argparse_value(option: Option, value: Any, where: str) -> Any:
    """The value ``option`` would have in a parsed Namespace, from its TOML form (type errors name ``where``)."""
    key = option.flag[2:]
    wrong = SpecError(f"{where}: {key} = {value!r} is a {type(value).__name__}; expected "
                      + {"int": "an integer", "float": "a number", "str": "a string", "choice": "a string",
                         "switch": "true or false", "pairs": "a table of NAME = VALUE (e.g. { A = \"1\" })",
                         "tolerations": "a list of \"KEY[=VALUE]:EFFECT\" strings"}.get(option.kind, "a list of strings")
                      + ".")
    if option.kind == "switch":
        if not isinstance(value, bool):
            raise wrong
        return (not option.default) if value else option.default
    if isinstance(value, bool):
        raise wrong
    if option.kind == "int" and isinstance(value, int):
        return value
    if option.kind == "float" and isinstance(value, (int, float)):
        return float(value)
    if option.kind in ("str", "choice") and isinstance(value, str):
        return value
    if option.kind == "pairs" and isinstance(value, Mapping):
        return [f"{k}={v}" for k, v in value.items()]
    if option.kind in ("tolerations", "list") and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise wrong


def namespace_of(values: Mapping[str, Any], where: str) -> argparse.Namespace:
    """A Namespace as if ``values`` (flag -> TOML value) had been typed as flags: what spec_from_namespace reads."""
    ns = argparse.Namespace()
    for flag, value in values.items():
        option = job_option(flag, where)
        setattr(ns, option.dest, _argparse_value(option, value, where))
    return ns


def _text(data: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> str:
    value = data.get(key, "")
    if not isinstance(value, str) or (required and not value.strip()):
        raise SpecError(f"{where}: {key} must be a{' non-empty' if required else ''} string, e.g. "
                        f"{key} = \"{'1.0' if key == 'version' else '…'}\"; got {value!r}.")
    return value.strip() if key != "docs" else value


def parse_profile(name: str, data: Mapping[str, Any], source: str, *, origin: str = "") -> Profile:
    """The Profile of one TOML table ``data``; SpecError naming the profile, ``source`` and what is wrong.

    Checks: known keys, a version, option names (job options of the table), each value's type and JobSpec's
    own rules (choices, ranges), and that every locked option is one the profile sets.
    """
    where = f"profile {name!r} ({source})"
    if not name or not all(c.isalnum() or c in "-_." for c in name):
        raise SpecError(f"{source}: profile name {name!r}: use letters, digits, '-', '_' or '.'.")
    unknown = sorted(set(data) - set(PROFILE_KEYS))
    if unknown:
        raise SpecError(f"{where}: unknown key {unknown[0]!r}; a profile has {', '.join(PROFILE_KEYS)} "
                        f"(job options go in its [options] table).")
    options = data.get("options", {})
    if not isinstance(options, Mapping):
        raise SpecError(f"{where}: options must be a table of job options, e.g. [options] gpus = 2.")
    values = {job_option(key, where).flag: value for key, value in options.items()}
    try:
        spec_from_namespace(namespace_of(values, where), base=JobSpec())
    except SpecError as error:
        if str(error).startswith(where):
            raise
        raise SpecError(f"{where}: {error}") from None
    locked = data.get("locked", [])
    if not isinstance(locked, list) or not all(isinstance(k, str) for k in locked):
        raise SpecError(f"{where}: locked must be a list of option names, e.g. locked = [\"strategy\"]; "
                        f"got {locked!r}.")
    locked_flags = frozenset(job_option(key, where).flag for key in locked)
    unset = sorted(f[2:] for f in locked_flags - set(values))
    if unset:
        raise SpecError(f"{where}: locks {', '.join(unset)} but does not set {'them' if len(unset) > 1 else 'it'}; "
                        f"add the value under [options] or drop it from locked.")
    return Profile(name=name, version=_text(data, "version", where, required=True),
                   description=_text(data, "description", where), values=values, locked=locked_flags,
                   source=source, docs=_text(data, "docs", where), contact=_text(data, "contact", where),
                   origin=origin)


def parse_document(data: Mapping[str, Any], source: str, *, default_name: str = "",
                   origin: str = "") -> list[Profile]:
    """The profiles of one TOML document: its ``[profiles.NAME]`` tables, else the document itself as one profile
    named ``name`` (or ``default_name``: a file's stem). Other tables of an nbtrain.toml are not looked at."""
    tables = data.get("profiles")
    if tables is not None:
        if not isinstance(tables, Mapping) or not all(isinstance(t, Mapping) for t in tables.values()):
            raise SpecError(f"{source}: [profiles] must hold one table per profile, e.g. [profiles.my-gpu].")
        return [parse_profile(name, table, source, origin=origin) for name, table in tables.items()]
    name = data.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise SpecError(f"{source}: a profile needs a name: name = \"…\" (or [profiles.NAME] tables).")
    return [parse_profile(name, data, source, origin=origin)]


