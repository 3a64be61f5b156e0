"""Worker side: check a bundle directory against its manifest before anything in it runs.

Standard library only (plus :mod:`nbtrain.errors`): this is the first thing a worker does, before
cloudpickle, torch or the cell are imported, and it must not execute or unpickle anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from nbtrain.errors import BundleIntegrityError

__all__ = [
    "MANIFEST_NAME",
    "RESULT_NAME",
    "canonical_manifest_bytes",
    "cell_line",
    "manifest_digest",
    "sha256_hex",
    "verify_bundle",
]

MANIFEST_NAME = "manifest.json"
#: main.py assigns the cell's last expression (or the function's return value) to this global.
RESULT_NAME = "__nbtrain_result__"
FORMAT_VERSION = 1
_DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")
_CHUNK = 1 << 20
_FIX = (
    "The bundle was changed after it was written, or copied incompletely. Delete the directory and "
    "run the cell again to rebuild it."
)


def cell_line(manifest: Mapping[str, Any], main_line: int) -> int | None:
    """The notebook cell's line number of line ``main_line`` of the bundle's main.py, or None when that line is
    not in the cell's part (imports and definitions nbtrain wrote above it) or the bundle is not a cell's.

    The one owner of the map: the manifest's ``cell`` says where the cell starts in main.py (``main_line``) and
    how many editor lines precede the body (``line_offset``: 1 for the ``%%distributed`` line). Failure
    tracebacks and hang stacks both say ``[cell line N]`` through it.
    """
    cell = manifest.get("cell") or {}
    start = cell.get("main_line") if isinstance(cell, Mapping) else None
    if not isinstance(start, int) or start <= 0 or main_line < start:
        return None
    return int(main_line - start + 1 + int(cell.get("line_offset", 1)))


def canonical_manifest_bytes(manifest: Mapping[str, Any]) -> bytes:
    """The exact bytes of manifest.json: sorted keys, 2-space indent, trailing newline."""
    return (json.dumps(dict(manifest), sort_keys=True, indent=2) + "\n").encode("utf-8")


def sha256_hex(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def manifest_digest(manifest: Mapping[str, Any]) -> str:
    """The bundle digest: sha256 of :func:`canonical_manifest_bytes`."""
    return sha256_hex(canonical_manifest_bytes(manifest))


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _fail(directory: Path, what: str) -> BundleIntegrityError:
    return BundleIntegrityError(f"Bundle {directory} failed verification: {what}. {_FIX}")


def _safe_relpath(rel: object) -> bool:
    if not isinstance(rel, str) or not rel or "\\" in rel:
        return False
    parts = PurePosixPath(rel).parts
    return not PurePosixPath(rel).is_absolute() and ".." not in parts and "." not in parts


def _files_on_disk(directory: Path) -> tuple[set[str], list[str]]:
    """Relative posix paths of regular files under ``directory`` and of anything that is not one."""
    found: set[str] = set()
    odd: list[str] = []
    for dirpath, dirnames, filenames in os.walk(directory, followlinks=False):
        base = Path(dirpath)
        for name in dirnames:
            if (base / name).is_symlink():
                odd.append((base / name).relative_to(directory).as_posix())
        for name in filenames:
            path = base / name
            rel = path.relative_to(directory).as_posix()
            if path.is_symlink() or not path.is_file():
                odd.append(rel)
            else:
                found.add(rel)
    return found, odd


def verify_bundle(directory: Path, expected_digest: str | None = None) -> dict[str, Any]:
    """Check every file of the bundle in ``directory`` and return its manifest.

    Contract:

    - manifest.json must exist, parse, have format 1 and a ``files`` table of sha256 hex digests;
    - the digest (sha256 of the canonical manifest bytes) must equal ``expected_digest`` when given,
      else the directory name when that is a 64-hex digest (bundles are written as ``<root>/<digest>``);
    - every listed file must exist with the listed size and sha256; no other file, link or special
      file may be present;
    - nothing is imported, executed or unpickled.

    Raises :class:`BundleIntegrityError` naming the first file that does not match, with expected and
    actual values.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise _fail(directory, "the directory does not exist")
    manifest_path = directory / MANIFEST_NAME
    try:
        raw = manifest_path.read_bytes()
    except OSError as err:
        raise _fail(directory, f"{MANIFEST_NAME} cannot be read ({err})") from None
    try:
        manifest = json.loads(raw)
    except ValueError as err:
        raise _fail(directory, f"{MANIFEST_NAME} is not valid JSON ({err})") from None
    if not isinstance(manifest, dict):
        raise _fail(directory, f"{MANIFEST_NAME} holds {type(manifest).__name__}, expected an object")
    if manifest.get("format") != FORMAT_VERSION:
        raise _fail(
            directory,
            f"{MANIFEST_NAME} has format {manifest.get('format')!r}; this nbtrain reads format "
            f"{FORMAT_VERSION} (was it written by another nbtrain version?)",
        )
    files = manifest.get("files")
    sizes = manifest.get("sizes", {})
    if not isinstance(files, dict) or not isinstance(sizes, dict):
        raise _fail(directory, f"{MANIFEST_NAME} has no 'files'/'sizes' tables")

    digest = manifest_digest(manifest)
    expected = expected_digest
    if expected is None and _DIGEST_RE.match(directory.name):
        expected = directory.name
    if expected is not None and digest != expected:
        raise _fail(
            directory,
            f"{MANIFEST_NAME} has digest {digest}, expected {expected}",
        )

    on_disk, odd = _files_on_disk(directory)
    if odd:
        raise _fail(directory, f"{odd[0]!r} is a link or special file; bundles hold plain files only")
    on_disk.discard(MANIFEST_NAME)
    for rel, want in sorted(files.items()):
        if not _safe_relpath(rel) or rel == MANIFEST_NAME:
            raise _fail(directory, f"the manifest lists an unsafe path {rel!r}")
        path = directory / rel
        if rel not in on_disk:
            raise _fail(directory, f"{rel} is missing (the manifest lists it with sha256 {want})")
        size = path.stat().st_size
        if rel in sizes and sizes[rel] != size:
            raise _fail(directory, f"{rel} has {size} bytes, expected {sizes[rel]}")
        actual = _file_sha256(path)
        if actual != want:
            raise _fail(directory, f"{rel} has sha256 {actual}, expected {want}")
    extra = sorted(on_disk - set(files))
    if extra:
        raise _fail(directory, f"{extra[0]} is not listed in the manifest (extra file)")
    return manifest
