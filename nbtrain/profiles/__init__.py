"""Profiles (templates): named, versioned presets of job options that a platform team ships and users pick.

``%%distributed --profile NAME`` and ``nbtrain submit DIR --profile NAME`` start from the profile's values;
flags override them except the ones it locks. :mod:`.model` parses and validates a profile (pure), :mod:`.load`
finds them (built-in, installed packages, the user's config, the project's nbtrain.toml), :mod:`.resolve`
layers defaults, nbtrain.toml, the profile and the flags and says where each value came from (pure).
docs/templates.md is the user's guide.
"""

from nbtrain.profiles.load import BUILTIN_DIR, ENTRY_POINT_GROUP, Catalog, config_dir, load_catalog
from nbtrain.profiles.model import Profile, parse_document, parse_profile
from nbtrain.profiles.resolve import Resolved, render_sources, resolve

__all__ = [
    "BUILTIN_DIR", "ENTRY_POINT_GROUP", "Catalog", "Profile", "Resolved", "config_dir", "load_catalog",
    "parse_document", "parse_profile", "render_sources", "resolve",
]
