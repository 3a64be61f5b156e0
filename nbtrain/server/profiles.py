"""``GET /nbtrain/profiles``: the profiles ``%%distributed --profile NAME`` can start from (the JupyterLab dialog's list).

``?path=DIR/nb.ipynb`` (relative to the server root, optional) also reads the ``[profiles.NAME]`` tables of the
``nbtrain.toml`` beside that notebook, which its kernel's magic reads; without it, the one in the server root.

Answer::

    {"profiles": [{"name", "version", "description", "source", "origin", "contact", "docs",
                   "options": {"--gpus": 8, "--env": {"A": "1"}, ...}, "locked": ["--strategy"]}, ...],
     "unreadable": [{"message": "…/team.toml: not valid TOML: …"}, ...]}

Profiles sorted by name; ``options`` holds the values a profile fixes, keyed by flag, as the profile's TOML has
them; ``locked`` the flags users may not override. A profile file or package that fails to load is listed under
``unreadable`` with its reason (the others are still listed), never a 500. Secret-looking NAME=VALUE values are
``***`` and URLs lose their credentials (:mod:`nbtrain.secrets`), as in every other answer: read-only
collaborators may read this. Authorised as reading runs (action ``read`` on resource ``nbtrain``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tornado.web
from jupyter_server.auth.decorator import authorized

from nbtrain.profiles.model import Profile
from nbtrain.server.base import BadRequest, BaseHandler

__all__ = ["ProfilesHandler", "catalog_json", "profile_wire"]


def _redacted(value: Any) -> Any:
    from nbtrain.secrets import redact_env, redact_url

    if isinstance(value, str):
        return redact_url(value)
    if isinstance(value, Mapping):
        return redact_env({str(k): str(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return value


def profile_wire(profile: Profile) -> dict[str, Any]:
    """One profile as the endpoint answers it (pure; JSON-safe, secrets masked)."""
    from nbtrain.profiles.render import profile_json

    data = profile_json(profile)
    for key in ("description", "source", "origin", "contact", "docs"):  # free text a team writes: URLs may carry
        if isinstance(data.get(key), str):                               # credentials (a docs link with a token)
            data[key] = _redacted(data[key])
    data["options"] = {flag: _redacted(value) for flag, value in profile.values.items()}
    return data


def catalog_json(project_toml: Path | None) -> dict[str, Any]:
    """The answer of ``GET /nbtrain/profiles`` for the catalog with ``project_toml``'s profiles (see the module doc)."""
    from nbtrain.profiles.load import load_catalog
    from nbtrain.secrets import redact_url

    catalog = load_catalog(project_toml)
    return {"profiles": [profile_wire(p) for p in sorted(catalog.profiles.values(), key=lambda p: p.name)],
            "unreadable": [{"message": redact_url(problem)} for problem in catalog.problems]}


def _project_toml(root_dir: str, path: str) -> Path:
    """The nbtrain.toml beside the notebook ``path`` (relative to ``root_dir``); BadRequest when it leaves the root."""
    root = Path(root_dir).resolve()
    if not path:
        return root / "nbtrain.toml"
    if Path(path).is_absolute():
        raise BadRequest(f"?path={path[:200]!r}: give the notebook's path relative to the server root.")
    try:
        notebook = (root / path).resolve()
        if not notebook.is_relative_to(root):
            raise BadRequest(f"?path={path[:200]!r} is outside the server's root directory; give a path inside it.")
        toml = (notebook if notebook.is_dir() else notebook.parent) / "nbtrain.toml"
        toml.is_file()  # a name too long for the filesystem fails here, not while loading
    except BadRequest:
        raise
    except (OSError, RuntimeError, ValueError) as error:  # a symlink loop, an unusable name
        raise BadRequest(f"?path={path[:200]!r} cannot be resolved ({type(error).__name__}).") from None
    return toml


class ProfilesHandler(BaseHandler):
    """The catalog of profiles, as :func:`catalog_json` builds it."""

    @tornado.web.authenticated
    @authorized("read")
    async def get(self) -> None:
        try:
            toml = _project_toml(self.settings.get("server_root_dir") or ".", self.get_query_argument("path", ""))
            answer = await self.run_blocking(catalog_json, toml)
        except Exception as error:  # noqa: BLE001 - becomes a JSON error
            return self.write_error_json(error)
        self.write_json(answer)
