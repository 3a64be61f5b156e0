"""The one exception tree of nbtrain.

Every message says what failed, the offending value, and what to do about it::

    NbtrainError
    ├── SpecError                 a JobSpec field has a bad value (also raised for bad magic flags)
    ├── CaptureError              the cell/function cannot be packaged; nothing was submitted
    │   ├── CellSyntaxError       syntax error, reported with the cell's own line numbers
    │   ├── UndefinedNameError    a name the cell uses is not defined in the notebook
    │   ├── UnpicklableError      an object can be neither written as source nor pickled
    │   ├── BundleTooLargeError   the captured objects exceed the size cap
    │   └── SecretInBundleError   a secret-looking value would ship inside the bundle
    ├── BundleIntegrityError      a bundle on disk does not match its manifest/digest
    ├── EnvironmentProblem        the machine lacks something (accelerate, GPUs, a free port)
    ├── BackendError              the backend could not start, query or stop a run
    ├── RunNotFoundError          no run with that id in the store
    ├── StoreFileError            a file in the store is damaged (truncated, edited); names the file
    └── RunFailedError            a run ended FAILED (raised by ``Run.wait``/``result``; names the rank)
"""

from __future__ import annotations

__all__ = [
    "BackendError",
    "BundleIntegrityError",
    "BundleTooLargeError",
    "CaptureError",
    "CellSyntaxError",
    "EnvironmentProblem",
    "NbtrainError",
    "RunFailedError",
    "RunNotFoundError",
    "SecretInBundleError",
    "SpecError",
    "StoreFileError",
    "UndefinedNameError",
    "UnpicklableError",
]


class NbtrainError(Exception):
    """Base of every error nbtrain raises on purpose."""


class SpecError(NbtrainError, ValueError):
    """A job specification field (or the magic flag behind it) has a bad value."""


class CaptureError(NbtrainError):
    """The cell or function cannot be packaged into a bundle. Nothing was submitted."""


class CellSyntaxError(CaptureError, SyntaxError):
    """The cell does not parse; the message carries the cell's own line number."""


class UndefinedNameError(CaptureError, NameError):
    """The cell uses a name that the notebook does not define."""


class UnpicklableError(CaptureError):
    """An object the cell needs can be neither written as source nor pickled."""


class BundleTooLargeError(CaptureError):
    """The captured objects exceed the configured size cap."""


class SecretInBundleError(CaptureError):
    """A value that looks like a secret would ship inside the bundle."""


class BundleIntegrityError(NbtrainError):
    """A bundle on disk does not match its manifest: tampered, truncated or corrupted."""


class EnvironmentProblem(NbtrainError, RuntimeError):
    """The machine lacks something a run needs (accelerate, GPUs, a free port, a writable store)."""


class BackendError(NbtrainError, RuntimeError):
    """The backend could not start, query or stop a run."""


class RunNotFoundError(NbtrainError, LookupError):
    """No run with the given id exists in the store."""


class StoreFileError(NbtrainError, ValueError):
    """A file in the run store is not what nbtrain wrote (truncated, edited, of another shape); the message names
    the file, what is wrong with it, and what to do."""


class RunFailedError(NbtrainError, RuntimeError):
    """A run ended in the FAILED state. ``failure`` holds the first failing rank's report."""

    def __init__(self, message: str, failure: object | None = None) -> None:
        super().__init__(message)
        self.failure = failure
