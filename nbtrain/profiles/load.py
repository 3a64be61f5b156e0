"""Where profiles come from (the I/O edge): built-in files, installed packages, the user's config, the project.

Sources, in the order a later one shadows an earlier profile of the same name:

1. built-in: ``nbtrain/profiles/builtin/*.toml`` (shipped in the wheel);
2. installed packages: entry points of the group ``nbtrain.profiles``; the object an entry point names may be
   TOML text, a dict (one profile, or ``{"profiles": {NAME: {...}}}``), a list of those, or a callable / a
   module with a ``profiles()`` function returning one of those: a platform team's approved set is a pip package;
3. the user's config: ``$NBTRAIN_CONFIG_DIR/profiles/*.toml`` (default ``$XDG_CONFIG_HOME/nbtrain``, i.e.
   ``~/.config/nbtrain``), one profile per file, named by the file's stem unless it says ``name``;
4. the project: ``[profiles.NAME]`` tables of ``nbtrain.toml`` (the current directory's, or the job directory's
   for ``nbtrain submit DIR``).

A broken source does not hide the others: its error is kept in :attr:`Catalog.problems` and reported when the
catalog is listed, or when a name it may have defined is asked for. A user's or a project's profile never replaces
a built-in or package profile that locks options (:func:`locks_out`): it is reported as a problem instead.
"""

from __future__ import annotations

import importlib.metadata
import os
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbtrain.errors import SpecError
from nbtrain.profiles.model import Profile, parse_document
from nbtrain.tomlfile import parse_toml, read_toml

__all__ = ["BUILTIN_DIR", "ENTRY_POINT_GROUP", "Catalog", "config_dir", "load_catalog", "locks_out"]

ENTRY_POINT_GROUP = "nbtrain.profiles"
BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"


@dataclass(frozen=True)
class Catalog:
    """The profiles found (name -> Profile, the winning one), those shadowed, and the sources that failed."""

    profiles: Mapping[str, Profile]
    shadowed: tuple[tuple[Profile, Profile], ...] = ()  # (hidden, by)
    problems: tuple[str, ...] = ()

    def get(self, name: str, asked_as: str = "--profile") -> Profile:
        """The profile ``name``; SpecError (starting with ``asked_as`` and the name) listing the known names and the
        broken sources when there is none."""
        profile = self.profiles.get(name)
        if profile is not None:
            return profile
        known = ", ".join(sorted(self.profiles)) or "none"
        broken = "".join(f"\n  a source that failed to load: {p}" for p in self.problems)
        raise SpecError(f"{asked_as} {name!r}: no such profile; known profiles: {known} "
                        f"(`nbtrain templates list` shows them and where they come from).{broken}")


def config_dir() -> Path:
    """The user's nbtrain config directory: NBTRAIN_CONFIG_DIR, else $XDG_CONFIG_HOME/nbtrain, else ~/.config/nbtrain."""
    if os.environ.get("NBTRAIN_CONFIG_DIR"):
        return Path(os.environ["NBTRAIN_CONFIG_DIR"]).expanduser()
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "nbtrain"


def _files(directory: Path, origin: str, label: str) -> Iterable[Callable[[], list[Profile]]]:
    for path in sorted(directory.glob("*.toml")) if directory.is_dir() else []:
        def one(path: Path = path) -> list[Profile]:
            return parse_document(read_toml(path), f"{label}{path}", default_name=path.stem, origin=origin)
        yield one


def _from_object(obj: Any, source: str) -> list[Profile]:
    """Profiles from what an entry point names (see the module docstring for the shapes accepted)."""
    if isinstance(obj, types.ModuleType):
        if not callable(getattr(obj, "profiles", None)):
            raise SpecError(f"{source}: module {obj.__name__} has no profiles() function; point the entry point "
                            "at a callable, or define profiles() returning TOML text or dicts.")
        obj = obj.profiles
    if callable(obj):
        obj = obj()
    if isinstance(obj, (str, bytes)):
        text = obj.decode() if isinstance(obj, bytes) else obj
        return parse_document(parse_toml(text, source), source, origin="package")
    if isinstance(obj, Mapping):
        return parse_document(obj, source, origin="package")
    if isinstance(obj, (list, tuple)):
        return [p for item in obj for p in _from_object(item, source)]
    raise SpecError(f"{source}: gave a {type(obj).__name__}; expected TOML text, a dict or a list of them.")


def _packages() -> Iterable[Callable[[], list[Profile]]]:
    for entry in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist = getattr(entry, "dist", None)
        source = f"package {dist.name if dist else '?'} {dist.version if dist else ''}".rstrip()
        source += f" (entry point {entry.name} = {entry.value})"

        def one(entry: importlib.metadata.EntryPoint = entry, source: str = source) -> list[Profile]:
            try:
                obj = entry.load()
            except Exception as error:  # noqa: BLE001 - a broken package must not hide the other profiles
                raise SpecError(f"{source}: cannot load it: {type(error).__name__}: {error}.") from None
            return _from_object(obj, source)
        yield one


def _project(path: Path) -> Iterable[Callable[[], list[Profile]]]:
    if path.is_file():
        def one() -> list[Profile]:
            data = read_toml(path)
            return parse_document({"profiles": data["profiles"]}, str(path), origin="project") \
                if "profiles" in data else []
        yield one


def load_catalog(project_toml: Path | None = None) -> Catalog:
    """Every profile of the four sources (``project_toml``: default ``./nbtrain.toml``), later shadowing earlier."""
    loaders = [*_files(BUILTIN_DIR, "built-in", "built-in "), *_packages(), *_files(config_dir() / "profiles", "user", ""),
               *_project(project_toml or Path("nbtrain.toml"))]
    profiles: dict[str, Profile] = {}
    shadowed: list[tuple[Profile, Profile]] = []
    problems: list[str] = []
    for load in loaders:
        try:
            found = load()
        except (SpecError, OSError) as error:
            problems.append(str(error))
            continue
        for profile in found:
            earlier = profiles.get(profile.name)
            if earlier is not None and locks_out(earlier, profile):
                problems.append(f"{profile.source}: defines profile {profile.name!r}, which {earlier.source} locks "
                                f"({', '.join(sorted(earlier.locked))}); a user or project profile cannot replace "
                                f"a locked one: give yours another name (ask {earlier.who_to_ask()} about the locks)")
                continue
            if earlier is not None:
                shadowed.append((earlier, profile))
            profiles[profile.name] = profile
    return Catalog(profiles, tuple(shadowed), tuple(problems))


def locks_out(earlier: Profile, later: Profile) -> bool:
    """Whether ``later`` may not shadow ``earlier``: a profile with locks, from the package or a platform team's
    package, is not replaced by a user's or a project's profile of the same name (that would drop its locks)."""
    return bool(earlier.locked) and earlier.origin in ("built-in", "package") and later.origin in ("user", "project")
