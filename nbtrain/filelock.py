"""The one advisory file lock of nbtrain (``fcntl.flock``): who may write a shared file, who owns a process role.

Every lock is a file opened ``O_RDWR | O_CREAT`` with a private mode (0600, the store is private) and locked
exclusively. The lock goes with the open descriptor: it is released when the holder closes it, or by the kernel
when the holder dies (a crashed holder never leaves a stale lock). Locks are per open file description, so two
:class:`FileLock` objects on one path in one process exclude each other too.

Three forms:

- ``with locked(path):`` blocks until the lock is held (short read-modify-writes: ``gang.json``);
- ``with try_locked(path, wait_s=0) as held:`` ``held`` is False when another process holds it (after waiting up
  to ``wait_s``): a claim that only one process may act on (restarting a failed attempt);
- :class:`FileLock` for a lock held across a process's life (the one mirroring or forwarding process), whose
  file may carry the holder's pid (:meth:`FileLock.write`); :func:`is_locked` probes one without taking it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["PRIVATE_FILE", "FileLock", "is_locked", "locked", "try_locked"]

PRIVATE_FILE = 0o600
POLL_S = 0.1


class FileLock:
    """An exclusive flock on ``path`` held from :meth:`acquire` (True) to :meth:`release`. Not thread-safe."""

    def __init__(self, path: str | os.PathLike[str], *, mode: int = PRIVATE_FILE) -> None:
        self.path = Path(path)
        self._mode = mode
        self._fd = -1

    @property
    def held(self) -> bool:
        """This object holds the lock now."""
        return self._fd >= 0

    @property
    def fd(self) -> int:
        """The locked descriptor (-1 when not held)."""
        return self._fd

    def acquire(self, *, blocking: bool = True, wait_s: float = 0.0) -> bool:
        """Take the lock: ``blocking`` waits as long as it takes; else try, retrying for up to ``wait_s``.

        True once held (also when already held by this object); False when another holder keeps it. Raises
        OSError when the file cannot be opened (a missing directory, a read-only store).
        """
        if self._fd >= 0:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, self._mode)
        try:
            if blocking:
                fcntl.flock(fd, fcntl.LOCK_EX)
            else:
                deadline = time.monotonic() + wait_s
                while not _try(fd):
                    if time.monotonic() >= deadline:
                        os.close(fd)
                        return False
                    time.sleep(POLL_S)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return True

    def write(self, text: str) -> None:
        """Replace the lock file's content with ``text`` (e.g. the holder's pid), while held."""
        if self._fd < 0:
            raise RuntimeError(f"{self.path}: write while the lock is not held")
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, text.encode("utf-8"), 0)

    def release(self) -> None:
        """Give the lock up (closing the descriptor). Idempotent."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _try(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextlib.contextmanager
def locked(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold ``path``'s lock for the ``with`` block, waiting for it as long as another holder keeps it."""
    with FileLock(path):
        yield


@contextlib.contextmanager
def try_locked(path: str | os.PathLike[str], *, wait_s: float = 0.0) -> Iterator[bool]:
    """Hold ``path``'s lock for the block (yields True), or yield False when another process holds it after
    ``wait_s`` seconds of retries (0: one try)."""
    lock = FileLock(path)
    try:
        yield lock.acquire(blocking=False, wait_s=wait_s)
    finally:
        lock.release()


def is_locked(path: str | os.PathLike[str]) -> bool:
    """True while some process holds ``path``'s lock (probes for an instant; False when the file is missing)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        if not _try(fd):
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
