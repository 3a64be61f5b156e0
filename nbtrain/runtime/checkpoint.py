"""Safe checkpoints for a gang: ``nbtrain.save_checkpoint(accelerator, step)`` / ``nbtrain.restore(accelerator)``.

Layout under the checkpoint root (``NBTRAIN_CHECKPOINT_DIR``, one per run)::

    step-000000120/            a complete checkpoint: Accelerate's save_state files + manifest.json
    step-000000130/
    latest                     "step-000000130": the last COMMITTED checkpoint (written last)
    .staging-000000140-a0/     a save in progress (never loaded)

A save is atomic for readers: every rank writes into a staging directory (Accelerate's
``save_state``), then after a barrier rank 0 writes ``manifest.json`` (sha256 of every file), renames
the directory into place, and only then replaces ``latest``. A gang killed at any moment leaves
``latest`` naming either the new complete checkpoint or the previous one. On restore, a checkpoint
whose files do not match its manifest (a flipped bit, a truncated file) is skipped with a warning in
favour of the previous complete one. The last ``NBTRAIN_KEEP_CHECKPOINTS`` (default 3) are kept;
the one ``latest`` names is never deleted.

The root may also be an fsspec URL (``--checkpoint-dir s3://bucket/prefix``): the same layout and
guarantees, through :mod:`nbtrain.runtime.objstore` (staging prefix, manifest with checksums written
after the files, ``latest`` written last). A ``file://`` URL is a local directory.

Fault injection for tests (documented, off by default): ``NBTRAIN_FAULT_INJECT=checkpoint:<point>:<step>``
with point ``before-files``, ``mid-files`` or ``before-latest`` kills rank 0 with SIGKILL there.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from nbtrain.events import EventKind
from nbtrain.runtime import context, metrics
from nbtrain.runtime.ckptfiles import LATEST, MANIFEST, sha256_file, step_name

__all__ = ["checkpoint_root", "checkpointing", "commit_copy", "committed_checkpoints", "local_sources", "restore", "save_checkpoint",
           "verify_checkpoint"]

ENV_CHECKPOINT_DIR = "NBTRAIN_CHECKPOINT_DIR"
ENV_RESUME_FROM = "NBTRAIN_RESUME_FROM"
ENV_KEEP = "NBTRAIN_KEEP_CHECKPOINTS"
ENV_FAULT = "NBTRAIN_FAULT_INJECT"


def _remote(root: str) -> bool:
    """True for an fsspec URL other than file:// (stdlib-only twin of nbtrain.storage.uris.is_remote)."""
    scheme = root.split("://", 1)[0].lower() if "://" in root else ""
    return scheme not in ("", "file", "local")


def _local(root: str) -> Path:
    return Path(unquote(urlsplit(root).path)) if "://" in root else Path(root)


def _root_text() -> str:
    root = os.environ.get(ENV_CHECKPOINT_DIR)
    if not root:
        raise RuntimeError(
            f"nbtrain.save_checkpoint needs a checkpoint directory but {ENV_CHECKPOINT_DIR} is not set: run the "
            "cell with %%distributed (or pass --checkpoint-dir) instead of running this code directly."
        )
    return root


def checkpointing() -> bool:
    """True when this run has somewhere to keep checkpoints: every local and Slurm run, Kubernetes with ``--volume``.

    Code that should also run where there is none (a Kubernetes run without a volume, the notebook itself) guards
    :func:`save_checkpoint` with it; :func:`restore` needs no guard (it returns 0 when there is nothing to load).
    """
    return bool(os.environ.get(ENV_CHECKPOINT_DIR))


def checkpoint_root() -> Path:
    """This run's checkpoint root as a local path; a clear error when the backend did not provide one.

    For a remote root (``s3://…``) there is no local path: use ``os.environ["NBTRAIN_CHECKPOINT_DIR"]``.
    """
    root = _root_text()
    if _remote(root):
        raise RuntimeError(f"{ENV_CHECKPOINT_DIR}={root} is remote storage, not a local directory; "
                           "read the URL from the environment and open it with fsspec.")
    return _local(root)




def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fault(point: str, step: int, rank: int) -> None:
    spec = os.environ.get(ENV_FAULT, "")
    if rank == 0 and spec == f"checkpoint:{point}:{step}":
        sys.stderr.write(f"[nbtrain] fault injection: killing rank 0 at checkpoint:{point}:{step}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def _barrier(accelerator: Any) -> None:
    accelerator.wait_for_everyone()


def save_checkpoint(accelerator: Any, step: int, **extra: Any) -> Path | str | None:
    """Save the full training state (Accelerate ``save_state``) as the checkpoint of ``step``. Call on EVERY rank.

    ``extra`` (JSON-serialisable) is stored in the manifest and returned by :func:`restore_info`.
    Returns the committed directory on rank 0 (its URL for a remote root), None on other ranks.
    """
    ctx = context.current()
    rank = int(getattr(accelerator, "process_index", 0))
    attempt = ctx.attempt if ctx else 0
    if _remote(_root_text()):
        url = _save_remote(accelerator, step, rank, attempt, extra)
        metrics.checkpoint_done(int(step), saved=True)  # may end the rank here (a step budget: nbtrain validate)
        return url
    root = checkpoint_root()
    staging = root / f".staging-{step:09d}-a{attempt}"
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
    _barrier(accelerator)
    _fault("before-files", step, rank)
    accelerator.save_state(str(staging))
    _barrier(accelerator)
    final = root / step_name(step)
    if rank == 0:
        _fault("mid-files", step, rank)
        _commit(root, staging, step, attempt=attempt, world_size=int(getattr(accelerator, "num_processes", 1)),
                extra=extra)
    _barrier(accelerator)
    metrics.checkpoint_done(int(step), saved=True)  # may end the rank here (a step budget: nbtrain validate)
    return final if rank == 0 else None


def _commit(root: Path, staging: Path, step: int, *, attempt: int, world_size: int, extra: dict[str, Any]) -> Path:
    """Rank 0: make the complete ``staging`` directory the checkpoint of ``step`` (manifest, rename, ``latest``)."""
    ctx = context.current()
    final = root / step_name(step)
    files = {p.relative_to(staging).as_posix(): sha256_file(p) for p in sorted(staging.rglob("*")) if p.is_file()}
    manifest = {"format": 1, "step": int(step), "time": time.time(), "attempt": attempt, "files": files,
                "world_size": world_size, "extra": extra}
    with open(staging / MANIFEST, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=2, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    _fsync_dir(staging)
    if final.exists():  # the same step saved again after a restart: replace it
        trash = root / f".old-{step:09d}-{os.getpid()}"
        os.replace(final, trash)
        shutil.rmtree(trash, ignore_errors=True)
    os.replace(staging, final)
    _fsync_dir(root)
    _fault("before-latest", step, 0)
    tmp = root / f".{LATEST}.tmp"
    tmp.write_text(step_name(step) + "\n", encoding="utf-8")
    os.replace(tmp, root / LATEST)
    _fsync_dir(root)
    _prune(root, keep=int(os.environ.get(ENV_KEEP, "3") or 3))
    size = sum((final / rel).stat().st_size for rel in files)
    if ctx is not None:
        ctx.emit(EventKind.CHECKPOINT, step=int(step), path=str(final), bytes=size, files=len(files))
    return final


def commit_copy(source: Path, step: int, *, world_size: int, extra: dict[str, Any]) -> Path:
    """Rank 0 only: commit a copy of the finished directory ``source`` (another library's checkpoint, e.g. a
    ``transformers.Trainer`` ``checkpoint-N``) as this run's checkpoint of ``step``, with the same guarantees as
    :func:`save_checkpoint` (staging, manifest, rename, ``latest`` last). A local checkpoint root only.

    A copy, not links: the library may rewrite its files in place later (the same step saved after a restart).
    """
    ctx = context.current()
    root = checkpoint_root()
    attempt = ctx.attempt if ctx else 0
    staging = root / f".staging-{step:09d}-a{attempt}"
    root.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(staging, ignore_errors=True)
    _fault("before-files", step, 0)
    shutil.copytree(source, staging)
    _fault("mid-files", step, 0)
    return _commit(root, staging, step, attempt=attempt, world_size=world_size, extra=extra)


def _save_remote(accelerator: Any, step: int, rank: int, attempt: int, extra: dict[str, Any]) -> str | None:
    from nbtrain.runtime import objstore

    url = _root_text()
    done = objstore.save(accelerator, step, url, rank=rank, attempt=attempt, extra=extra,
                         keep=int(os.environ.get(ENV_KEEP, "3") or 3), barrier=lambda: _barrier(accelerator),
                         fault=lambda point: _fault(point, step, rank))
    ctx = context.current()
    if done is not None and ctx is not None:
        final, size, count = done
        ctx.emit(EventKind.CHECKPOINT, step=int(step), path=final, bytes=size, files=count)
    return done[0] if done is not None else None


def _steps(root: Path) -> list[int]:
    out = []
    for path in root.glob("step-*"):
        try:
            out.append(int(path.name.split("-", 1)[1]))
        except ValueError:
            continue
    return sorted(out)


def _prune(root: Path, keep: int) -> None:
    latest = _latest_step(root)
    committed = [s for s in _steps(root) if latest is not None and s <= latest]
    for step in committed[: max(0, len(committed) - max(1, keep))]:
        if step != latest:
            shutil.rmtree(root / step_name(step), ignore_errors=True)
    for stale in root.glob(".staging-*"):
        if stale.is_dir() and stale.stat().st_mtime < time.time() - 3600:
            shutil.rmtree(stale, ignore_errors=True)


def _latest_step(root: Path) -> int | None:
    try:
        name = (root / LATEST).read_text(encoding="utf-8").strip()
        return int(name.split("-", 1)[1])
    except (OSError, ValueError, IndexError):
        return None


def verify_checkpoint(directory: Path) -> tuple[bool, str]:
    """(ok, why): every file listed in the manifest exists with its sha256 and no listed file is missing."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return False, f"no readable {MANIFEST} ({error})"
    for rel, expected in manifest.get("files", {}).items():
        path = directory / rel
        if not path.is_file():
            return False, f"{rel} is missing"
        actual = sha256_file(path)
        if actual != expected:
            return False, f"{rel} has sha256 {actual[:12]}… but the manifest says {expected[:12]}…"
    return True, "ok"


def committed_checkpoints(root: Path) -> list[Path]:
    """Restore candidates, best first: the one ``latest`` names, then older complete ones.

    Directories newer than ``latest`` were never committed (the save died before the pointer moved)
    and are not candidates; without a ``latest`` file nothing was ever committed.
    """
    latest = _latest_step(root)
    if latest is None:
        return []
    return [root / step_name(s) for s in reversed(_steps(root)) if s <= latest]


def local_sources() -> list[Path]:
    """Where a restore looks, best first, local roots only: the run being resumed's, then this run's."""
    sources = [os.environ.get(ENV_RESUME_FROM), os.environ.get(ENV_CHECKPOINT_DIR)]
    return [_local(s) for s in dict.fromkeys(s for s in sources if s and not _remote(s))]


def restore(accelerator: Any) -> int:
    """Load the newest complete checkpoint of this run (or of the run being resumed) on EVERY rank.

    Returns the step to start from: the saved step + 1, or 0 when there is no checkpoint. Corrupted
    checkpoints are skipped with a warning (stderr and a notice event) in favour of older ones.
    """
    rank = int(getattr(accelerator, "process_index", 0))
    sources = [os.environ.get(ENV_RESUME_FROM), os.environ.get(ENV_CHECKPOINT_DIR)]
    for source in dict.fromkeys(s for s in sources if s):
        if _remote(source):
            step = _restore_remote(accelerator, source, rank)
        else:
            step = _restore_from(accelerator, [(d, None) for d in committed_checkpoints(_local(source))], rank)
        if step is not None:
            metrics.checkpoint_done(step, saved=False)
            return step + 1
    return 0


def _restore_remote(accelerator: Any, url: str, rank: int) -> int | None:
    from nbtrain.runtime import objstore

    for candidate, download in objstore.restore_candidates(url):
        local = Path(tempfile.mkdtemp(prefix=f"nbtrain-restore-r{rank}-"))
        try:
            download(local)
            step = _restore_from(accelerator, [(local, candidate)], rank)
        finally:
            shutil.rmtree(local, ignore_errors=True)
        if step is not None:
            return step
    return None


def _restore_from(accelerator: Any, candidates: list[tuple[Path, str | None]], rank: int) -> int | None:
    """Load the first candidate whose files match its manifest; its step, or None when none does.

    Each candidate is ``(local directory, the URL it was downloaded from or None)``.
    """
    ctx = context.current()
    for directory, origin in candidates:
        shown = origin or str(directory)
        ok, why = verify_checkpoint(directory)
        if not ok:
            message = f"checkpoint {shown} is corrupted ({why}); trying the previous one"
            sys.stderr.write(f"[nbtrain] rank {rank}: {message}\n")
            if ctx is not None and rank == 0:
                ctx.emit(EventKind.NOTICE, message=message)
            continue
        accelerator.load_state(str(directory))
        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
        step = int(manifest["step"])
        if ctx is not None and rank == 0:
            ctx.emit(EventKind.NOTICE, message=f"attempt {ctx.attempt} resumed from the checkpoint of step {step} "
                                              f"({shown})")
        return step
    return None
