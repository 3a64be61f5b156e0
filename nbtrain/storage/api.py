"""The runtime API: ``nbtrain.resolve("dataset://digits@v1")`` / ``nbtrain.dataset_path("digits@v1")``.

Training code names data by role; the roots in effect where it runs (``NBTRAIN_STORAGE_*``,
``./nbtrain.toml``, the user's config: :mod:`nbtrain.storage.config`) say where it lives. Inside a run,
every dataset resolved is reported once per process as a ``dataset`` event, which the tracking agent
turns into the MLflow tags ``nbtrain.dataset``, ``nbtrain.dataset_version`` and ``nbtrain.datasets``:
a run is tagged with the data its code actually asked for.
"""

from __future__ import annotations

import threading

from nbtrain.secrets import redact_url
from nbtrain.storage.config import load_roots
from nbtrain.storage.uris import Kind, StorageRoots, StorageURI, local_path, parse
from nbtrain.storage.uris import resolve as resolve_pure

__all__ = ["dataset_path", "resolve"]

_lock = threading.Lock()
_recorded: list[str] = []  # "name@version" of the datasets this process reported, in order


def resolve(uri: str, roots: StorageRoots | None = None) -> str:
    """Where ``uri`` lives: a local path when its root is local (a path or ``file://``), else the fsspec URL.

    Strings that are not storage URIs come back unchanged (``s3://bucket/x`` stays as it is). ``roots``
    default to the ones configured here. Raises SpecError for a malformed URI or a root nobody configured.
    A ``dataset://`` URI resolved inside a run is recorded for MLflow (see the module docstring).
    """
    target = resolve_pure(uri, load_roots() if roots is None else roots)
    if target != uri:
        parsed = parse(uri)
        if parsed.kind is Kind.DATASET:
            _record(parsed, target)
    path = local_path(target)
    return path if path is not None else target


def dataset_path(name: str, roots: StorageRoots | None = None) -> str:
    """``resolve("dataset://" + name)``: ``dataset_path("digits@v1")`` -> ``<datasets root>/digits/v1``."""
    return resolve(f"dataset://{name}", roots)


def _record(uri: StorageURI, target: str) -> None:
    from nbtrain.events import EventKind
    from nbtrain.runtime import context

    ctx = context.current()
    label = f"{uri.name}@{uri.version}" if uri.version else uri.name
    with _lock:
        if ctx is None or label in _recorded:
            return
        _recorded.append(label)
        datasets = list(_recorded)
    ctx.emit(EventKind.DATASET, name=uri.name, version=uri.version, url=redact_url(target), datasets=datasets)
