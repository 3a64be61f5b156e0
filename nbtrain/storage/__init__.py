"""Storage URIs and roots (``dataset://``, ``checkpoint://``, ``artifact://`` -> any fsspec URL).

- :mod:`nbtrain.storage.uris` — the pure model: :class:`StorageRoots`, :func:`parse`, :func:`resolve`.
- :mod:`nbtrain.storage.config` — where roots come from (env, ``./nbtrain.toml``, the user's config).
- :mod:`nbtrain.storage.fs` — fsspec at the edge: :func:`check_url` before a run starts.
- :mod:`nbtrain.storage.api` — what training code calls (``nbtrain.resolve``, ``nbtrain.dataset_path``).
- :mod:`nbtrain.storage.checkpoints` — the run's checkpoint root from ``--checkpoint-dir``.
"""

from __future__ import annotations

from nbtrain.storage.config import load_roots, roots_from_env, roots_from_table
from nbtrain.storage.uris import Kind, StorageRoots, StorageURI, is_remote, join, local_path, parse, resolve

__all__ = [
    "Kind", "StorageRoots", "StorageURI", "is_remote", "join", "load_roots", "local_path", "parse", "resolve",
    "roots_from_env", "roots_from_table",
]
