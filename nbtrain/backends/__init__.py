"""Backends: where gangs run. ``get_backend(name)`` returns one by name."""

from __future__ import annotations

from typing import Any

from nbtrain.errors import SpecError

__all__ = ["get_backend"]


def get_backend(name: str, **options: Any) -> Any:
    """The backend called ``name`` ("local"; "kubernetes" when implemented), created lazily."""
    if name == "local":
        from nbtrain.backends.local import LocalBackend

        return LocalBackend(**options)
    if name == "kubernetes":
        try:
            from nbtrain.backends.kubernetes import KubernetesBackend
        except ImportError as error:
            raise SpecError(f"--backend kubernetes is not available: {error}") from error
        return KubernetesBackend(**options)
    raise SpecError(f"--backend: unknown backend {name!r}; choose local or kubernetes.")
