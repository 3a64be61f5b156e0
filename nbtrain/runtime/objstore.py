"""Checkpoints under an fsspec URL (``s3://bucket/prefix/<run id>``): the same layout and guarantees as on disk.

Object stores have no rename, so a save goes::

    every rank   save_state into a private local temp dir, upload it to  .staging-STEP-aATTEMPT/
                 and write .staging-…/.parts/rank-R.json  ({file: sha256, bytes})
    barrier
    rank 0       merge the parts, copy the staging files to step-STEP/, write step-STEP/manifest.json LAST
                 (a step directory without a readable manifest is incomplete), then write ``latest``,
                 then delete the staging prefix and prune old checkpoints

A gang killed at any point leaves ``latest`` naming a complete checkpoint or the previous one; a restore
downloads a candidate to a local temp dir, checks every sha256 against its manifest, and falls back to
the previous complete checkpoint when one does not match. Credentials are fsspec's business (s3fs reads
``AWS_*`` from the environment); nothing here writes them anywhere.

Worker side: stdlib + fsspec (imported when a remote root is used), like the rest of nbtrain.runtime.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nbtrain.runtime.ckptfiles import LATEST, MANIFEST, sha256_file, step_name

__all__ = ["committed", "restore_candidates", "save"]

PARTS = ".parts"


def _fs(url: str) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError:
        raise RuntimeError(f"checkpoint root {url} needs fsspec (and s3fs for s3://): pip install 'nbtrain[s3]'") \
            from None
    fs, path = fsspec.core.url_to_fs(url)
    return fs, path.rstrip("/")




def _upload_rank(fs: Any, local: Path, staging: str, rank: int) -> None:
    part: dict[str, dict[str, Any]] = {}
    for path in sorted(local.rglob("*")):
        if path.is_file():
            rel = path.relative_to(local).as_posix()
            fs.put_file(str(path), f"{staging}/{rel}")
            part[rel] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    fs.pipe_file(f"{staging}/{PARTS}/rank-{rank:05d}.json", json.dumps(part, sort_keys=True).encode())


def _merged_parts(fs: Any, staging: str) -> dict[str, dict[str, Any]]:
    fs.invalidate_cache()
    files: dict[str, dict[str, Any]] = {}
    for name in sorted(fs.ls(f"{staging}/{PARTS}", detail=False), reverse=True):  # rank 0's entry wins
        files.update(json.loads(fs.cat_file(name)))
    return files


def save(accelerator: Any, step: int, url: str, *, rank: int, attempt: int, keep: int, extra: dict[str, Any],
         barrier: Callable[[], None], fault: Callable[[str], None]) -> tuple[str, int, int] | None:
    """One checkpoint of ``step`` under ``url`` (module docstring). Call on every rank.

    Returns ``(committed URL, bytes, files)`` on rank 0, None elsewhere. ``fault(point)`` is the test hook.
    """
    fs, root = _fs(url)
    staging = f"{root}/.staging-{step:09d}-a{attempt}"
    if rank == 0 and fs.exists(staging):
        fs.rm(staging, recursive=True)
    barrier()
    fault("before-files")
    local = Path(tempfile.mkdtemp(prefix=f"nbtrain-ckpt-{step}-r{rank}-"))
    try:
        accelerator.save_state(str(local))
        _upload_rank(fs, local, staging, rank)
    finally:
        shutil.rmtree(local, ignore_errors=True)
    barrier()
    result: tuple[str, int, int] | None = None
    if rank == 0:
        fault("mid-files")
        parts = _merged_parts(fs, staging)
        manifest = {"format": 1, "step": int(step), "time": time.time(), "attempt": attempt,
                    "files": {rel: info["sha256"] for rel, info in sorted(parts.items())},
                    "world_size": int(getattr(accelerator, "num_processes", 1)), "extra": extra}
        final = f"{root}/{step_name(step)}"
        if fs.exists(final):  # the same step saved again after a restart: unmark it first, then replace it
            if fs.exists(f"{final}/{MANIFEST}"):
                fs.rm_file(f"{final}/{MANIFEST}")
            fs.rm(final, recursive=True)
        for rel in sorted(parts):
            fs.copy(f"{staging}/{rel}", f"{final}/{rel}")
        fs.pipe_file(f"{final}/{MANIFEST}", json.dumps(manifest, indent=2, sort_keys=True).encode())
        fault("before-latest")
        fs.pipe_file(f"{root}/{LATEST}", (step_name(step) + "\n").encode())
        fs.rm(staging, recursive=True)
        _prune(fs, root, keep=keep, attempt=attempt)
        result = (f"{url.rstrip('/')}/{step_name(step)}", sum(int(i["bytes"]) for i in parts.values()), len(parts))
    barrier()
    return result


def _latest_step(fs: Any, root: str) -> int | None:
    """The step ``latest`` names; None when there is no ``latest`` (no checkpoint committed yet) or it is garbled.

    Any other error reading it (throttling, network, permissions: s3fs raises OSError) is raised: taken for "no
    checkpoint", one rank would start from step 0 while the others restore, or every rank would, and the next
    save would name a lower step ``latest`` and hide the good ones.
    """
    try:
        text = fs.cat_file(f"{root}/{LATEST}")
    except FileNotFoundError:
        return None
    except OSError as error:
        raise RuntimeError(f"cannot read the checkpoint marker {root}/{LATEST} ({error}); nothing was restored or "
                           "saved: check the storage's credentials and reachability, then resume") from error
    try:
        return int(text.decode("utf-8").strip().split("-", 1)[1])
    except (UnicodeDecodeError, ValueError, IndexError):
        return None


def _entries(fs: Any, root: str) -> list[str]:
    fs.invalidate_cache()
    try:
        return [name.rstrip("/").rsplit("/", 1)[-1] for name in fs.ls(root, detail=False)]
    except FileNotFoundError:
        return []


def _steps(fs: Any, root: str) -> list[int]:
    out = []
    for name in _entries(fs, root):
        if name.startswith("step-"):
            try:
                out.append(int(name.split("-", 1)[1]))
            except ValueError:
                continue
    return sorted(out)


def _prune(fs: Any, root: str, *, keep: int, attempt: int) -> None:
    latest = _latest_step(fs, root)
    committed_steps = [s for s in _steps(fs, root) if latest is not None and s <= latest]
    for step in committed_steps[: max(0, len(committed_steps) - max(1, keep))]:
        if step != latest:
            fs.rm(f"{root}/{step_name(step)}", recursive=True)
    # Object stores keep no reliable directory times: a staging prefix of an earlier attempt is stale
    # (its gang is gone), one of this attempt below the committed step was abandoned.
    for name in _entries(fs, root):
        if name.startswith(".staging-"):
            try:
                step_text, attempt_text = name[len(".staging-"):].split("-a", 1)
                stale = int(attempt_text) < attempt or (latest is not None and int(step_text) <= latest)
            except ValueError:
                continue
            if stale:
                fs.rm(f"{root}/{name}", recursive=True)


def committed(url: str) -> list[str]:
    """Restore candidates under ``url``, best first: the one ``latest`` names, then older ones (URLs)."""
    fs, root = _fs(url)
    latest = _latest_step(fs, root)
    if latest is None:
        return []
    base = url.rstrip("/")
    return [f"{base}/{step_name(s)}" for s in reversed(_steps(fs, root)) if s <= latest]


def restore_candidates(url: str) -> list[tuple[str, Callable[[Path], None]]]:
    """``[(candidate URL, download(into local dir))]`` best first, for :func:`nbtrain.runtime.checkpoint.restore`."""
    fs, _ = _fs(url)

    def download(candidate: str) -> Callable[[Path], None]:
        def into(local: Path) -> None:
            _, path = _fs(candidate)
            for remote in fs.find(path):
                rel = remote[len(path):].lstrip("/")
                target = local / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                fs.get_file(remote, str(target))
        return into

    return [(candidate, download(candidate)) for candidate in committed(url)]
