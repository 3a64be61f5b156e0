"""Storage URIs (``dataset://``, ``checkpoint://``, ``artifact://``) and the roots they resolve through (pure).

A storage URI names data by role, not by place::

    dataset://digits@v1        -> <datasets root>/digits/v1
    dataset://digits           -> <datasets root>/digits
    checkpoint://team/llm      -> <checkpoints root>/team/llm
    artifact://reports/x.html  -> <artifacts root>/reports/x.html

A root is any fsspec URL (``s3://bucket/prefix``, ``gs://…``, ``file:///data``) or a local path
(``/mnt/nfs/datasets``). :func:`resolve` is pure: the roots come in as a :class:`StorageRoots`
value (see :mod:`nbtrain.storage.config` for where they are read from). Every error is a SpecError
naming the URI, what is wrong with it and how to fix it.
"""

from __future__ import annotations

import enum
import posixpath
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from nbtrain.errors import SpecError

__all__ = [
    "Kind", "StorageRoots", "StorageURI", "is_remote", "join", "local_path", "parse", "resolve", "scheme_of",
]


class Kind(str, enum.Enum):
    """The role a storage URI names; the value is the ``[storage]`` key of its root."""

    DATASET = "datasets"
    CHECKPOINT = "checkpoints"
    ARTIFACT = "artifacts"

    @property
    def scheme(self) -> str:
        """``dataset``, ``checkpoint`` or ``artifact``: the URI scheme of this kind."""
        return self.value[:-1]

    @property
    def env(self) -> str:
        """The environment variable that sets this kind's root (``NBTRAIN_STORAGE_DATASETS``, …)."""
        return f"NBTRAIN_STORAGE_{self.value.upper()}"


_BY_SCHEME = {kind.scheme: kind for kind in Kind}
_NAME = re.compile(r"[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)*")
_VERSION = re.compile(r"[A-Za-z0-9_.\-]+")


@dataclass(frozen=True)
class StorageRoots:
    """Where each kind of storage URI points: an fsspec URL or a local path per kind, or None (not configured).

    ``sources`` says where each configured root came from (``"NBTRAIN_STORAGE_DATASETS"``,
    ``"./nbtrain.toml [storage] datasets"``), for messages and ``--dry-run``-style displays.
    """

    datasets: str | None = None
    checkpoints: str | None = None
    artifacts: str | None = None
    sources: tuple[tuple[str, str], ...] = ()

    def root(self, kind: Kind) -> str | None:
        """The root configured for ``kind``, or None."""
        value: str | None = getattr(self, kind.value)
        return value

    def source(self, kind: Kind) -> str | None:
        """Where the root of ``kind`` came from, or None when it is not configured."""
        return dict(self.sources).get(kind.value)

    def over(self, base: StorageRoots) -> StorageRoots:
        """These roots, falling back to ``base`` for each kind this value leaves unset."""
        values = {kind.value: self.root(kind) or base.root(kind) for kind in Kind}
        sources = {**dict(base.sources), **dict(self.sources)}
        kept = tuple((k, v) for k, v in sorted(sources.items()) if values.get(k))
        return StorageRoots(**values, sources=kept)

    def env(self) -> dict[str, str]:
        """``{NBTRAIN_STORAGE_*: root}`` for the configured kinds: what a launcher puts in the ranks' environment."""
        return {kind.env: value for kind in Kind if (value := self.root(kind))}


@dataclass(frozen=True)
class StorageURI:
    """A parsed storage URI: its kind, its path under the root, and (datasets only) its version."""

    kind: Kind
    name: str
    version: str | None = None

    def __str__(self) -> str:
        return f"{self.kind.scheme}://{self.name}" + (f"@{self.version}" if self.version else "")

    @property
    def relative(self) -> str:
        """The path under the root: ``NAME`` or ``NAME/VERSION``."""
        return f"{self.name}/{self.version}" if self.version else self.name


def scheme_of(url: str) -> str:
    """The URL scheme of ``url`` (``s3``, ``file``, …); ``""`` for a plain local path."""
    match = re.match(r"([A-Za-z][A-Za-z0-9+.\-]*)://", url)
    return match.group(1).lower() if match else ""


def is_remote(url: str) -> bool:
    """True when ``url`` is an fsspec URL other than ``file://`` (object storage, HTTP, …)."""
    return scheme_of(url) not in ("", "file", "local")


def local_path(url: str) -> str | None:
    """The local filesystem path of ``url`` (a plain path or a ``file://`` URL), else None."""
    scheme = scheme_of(url)
    if scheme == "":
        return url
    if scheme in ("file", "local"):
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            return None
        return unquote(parts.path) or "/"
    return None


def join(root: str, relative: str) -> str:
    """``root`` + ``/`` + ``relative`` for a URL or a local path (no doubled or trailing slashes)."""
    relative = relative.strip("/")
    if not relative:
        return root
    scheme = scheme_of(root)
    if scheme:
        head, rest = root.split("://", 1)
        return f"{head}://{rest.rstrip('/')}/{relative}" if rest.strip("/") else f"{head}://{rest}{relative}"
    return posixpath.join(root, relative) if root else relative


def parse(uri: str) -> StorageURI:
    """``dataset://NAME[@VERSION]``, ``checkpoint://PATH`` or ``artifact://PATH`` as a :class:`StorageURI`.

    NAME/PATH: letters, digits, ``_ . -`` in ``/``-separated parts, no ``..``. Raises SpecError otherwise.
    """
    scheme = scheme_of(uri)
    kind = _BY_SCHEME.get(scheme)
    if kind is None:
        raise SpecError(f"{uri!r} is not a storage URI: use dataset://NAME[@VERSION], checkpoint://PATH or "
                        "artifact://PATH (or pass an fsspec URL such as s3://bucket/key directly).")
    body = uri.split("://", 1)[1]
    version: str | None = None
    if "@" in body:
        if kind is not Kind.DATASET:
            raise SpecError(f"{uri!r}: only dataset:// URIs take an @VERSION; drop the '@…' part.")
        body, version = body.rsplit("@", 1)
        if not _VERSION.fullmatch(version) or set(version) == {"."}:  # "." or "..": a directory, not a version
            raise SpecError(f"{uri!r}: the version {version!r} must be letters, digits, '_', '.' or '-', and not "
                            f"only dots (e.g. {kind.scheme}://{body}@v1).")
    if not _NAME.fullmatch(body) or any(part in (".", "..") for part in body.split("/")):
        raise SpecError(f"{uri!r}: the name {body!r} must be '/'-separated parts of letters, digits, '_', '.' "
                        f"or '-' with no '.' or '..' part (e.g. {kind.scheme}://digits).")
    return StorageURI(kind, body, version)


def resolve(uri: str | StorageURI, roots: StorageRoots) -> str:
    """The fsspec URL (or local path) that ``uri`` names under ``roots``; any other string is returned unchanged.

    Raises SpecError naming the URI, the missing root and the two ways to configure it.
    """
    if isinstance(uri, str):
        if scheme_of(uri) not in _BY_SCHEME:
            return uri
        uri = parse(uri)
    root = roots.root(uri.kind)
    if not root:
        raise SpecError(
            f"{uri} needs a {uri.kind.value} root but none is configured: set {uri.kind.env}=URL "
            f"(e.g. s3://bucket/{uri.kind.value} or /mnt/data/{uri.kind.value}) or add `{uri.kind.value} = \"URL\"` "
            "to the [storage] table of ./nbtrain.toml or your user config."
        )
    return join(root, uri.relative)
