"""The bundle's data types: options in, an immutable :class:`Bundle` out."""

from __future__ import annotations

import copy
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any

from nbtrain.errors import SpecError

from .reader import canonical_manifest_bytes, sha256_hex

__all__ = ["Bundle", "CaptureKind", "CaptureOptions", "CapturedName"]


@dataclass(frozen=True)
class CaptureOptions:
    """How a cell is captured.

    - ``max_pickle_bytes``: cap on the total size of objects.pkl (:class:`BundleTooLargeError` above).
    - ``allow_secrets``: skip the refusal of secret-looking values (:class:`SecretInBundleError`).
    - ``max_literal_chars``: a plain value whose source text is longer is pickled instead.
    - ``extra_files``: local files attached under ``files/<basename>`` in the bundle.
    """

    max_pickle_bytes: int = 50 * 1024 * 1024
    allow_secrets: bool = False
    max_literal_chars: int = 10_000
    extra_files: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.max_pickle_bytes < 0:
            raise SpecError(f"max_pickle_bytes must be >= 0, got {self.max_pickle_bytes}; use e.g. 50 * 2**20.")
        if self.max_literal_chars < 0:
            raise SpecError(f"max_literal_chars must be >= 0, got {self.max_literal_chars}.")
        if isinstance(self.extra_files, str):
            raise SpecError(
                f"extra_files must be a tuple of paths, got the string {self.extra_files!r}; "
                f"write extra_files=({self.extra_files!r},)."
            )
        object.__setattr__(self, "extra_files", tuple(str(p) for p in self.extra_files))


class CaptureKind(str, enum.Enum):
    """How one name travels to the workers."""

    IMPORT = "import"  # an import statement in main.py
    SOURCE = "source"  # the notebook definition's source code in main.py
    LITERAL = "literal"  # ``name = <literal>`` in main.py
    PICKLE = "pickle"  # cloudpickled into objects.pkl

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class CapturedName:
    """One captured name: how it ships and how many bytes it adds to the bundle."""

    name: str
    kind: CaptureKind
    size: int
    detail: str

    def to_json(self) -> dict[str, Any]:
        """The manifest entry for this name."""
        return {"name": self.name, "kind": self.kind.value, "size": self.size, "detail": self.detail}


@dataclass(frozen=True)
class Bundle:
    """An immutable, content-addressed package of a cell (or function) and what it uses.

    Nothing is on disk until :meth:`write`. ``files`` maps relative paths ("main.py", "objects.pkl",
    "files/...") to their bytes; ``manifest`` is the JSON-serialisable manifest that lists their
    sha256 digests; the bundle's :attr:`digest` is the sha256 of the canonical manifest bytes.
    """

    files: Mapping[str, bytes]
    manifest: Mapping[str, Any]
    captured: tuple[CapturedName, ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "files", MappingProxyType(dict(self.files)))
        object.__setattr__(self, "manifest", MappingProxyType(copy.deepcopy(dict(self.manifest))))
        object.__setattr__(self, "captured", tuple(self.captured))

    @cached_property
    def manifest_bytes(self) -> bytes:
        """The exact bytes of manifest.json."""
        return canonical_manifest_bytes(self.manifest)

    @cached_property
    def digest(self) -> str:
        """sha256 hex of :attr:`manifest_bytes`; also the bundle's directory name."""
        return sha256_hex(self.manifest_bytes)

    @property
    def main_source(self) -> str:
        """The generated main.py as text."""
        return self.files["main.py"].decode("utf-8")

    def write(self, root: Path) -> Path:
        """Write the bundle to ``root/<digest>/`` atomically and return that directory.

        An existing directory with the same digest is kept as it is (content-addressed).
        """
        from .writer import write_bundle

        return write_bundle(Path(root), self.digest, self.files, self.manifest_bytes)

    def report(self) -> str:
        """A human-readable dry-run table: each captured name, how it ships, its size; totals."""
        from .report import format_report

        return format_report(self)
