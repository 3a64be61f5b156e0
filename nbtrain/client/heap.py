"""Give the freed heap of a long-watching process back to the system (glibc's ``malloc_trim``).

A watcher reads megabytes of log bytes a round and frees them again; the monitor keeps a few small blocks of
each. glibc keeps the freed memory in its arenas (the watcher thread has its own), pinned around what is kept,
so the kernel's resident memory grows by tens of MB at 512 ranks although Python holds a few MB. Trimming now and
then returns it (measured: 24 MB -> 13 MB after reading a 512-rank gang, ~10 ms a call). Elsewhere (musl, macOS)
there is nothing to call and :func:`release_free_memory` says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Callable

__all__ = ["TRIM_AFTER_BYTES", "TRIM_EVERY_S", "release_free_memory", "trim_due"]

TRIM_EVERY_S = 5.0  # at most one trim this often ...
TRIM_AFTER_BYTES = 32 * 1024 * 1024  # ... and only after this many bytes were read since the last one

_trim: Callable[[int], int] | None = None
_looked = False


def _malloc_trim() -> Callable[[int], int] | None:
    global _trim, _looked
    if not _looked:
        _looked = True
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                trim = libc.malloc_trim  # int malloc_trim(size_t pad)
                trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
                _trim = trim
            except (OSError, AttributeError):  # not glibc
                _trim = None
    return _trim


def trim_due(read_since: int, seconds_since: float) -> bool:
    """Whether a trim is worth its cost now: enough bytes passed through since the last one, long enough ago."""
    return read_since >= TRIM_AFTER_BYTES and seconds_since >= TRIM_EVERY_S


def release_free_memory() -> bool:
    """Return freed heap memory to the system; False where the C library cannot (then nothing happened)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
