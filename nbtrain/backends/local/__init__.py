"""Local process-gang backend (the embedded default)."""

from nbtrain.backends.local.backend import LocalBackend

__all__ = ["LocalBackend"]
