"""Files the run's code logged through its trackers (``get_tracker("mlflow").log_artifact``, ``log_figure``):
:data:`~nbtrain.events.EventKind.ARTIFACT` events of rank 0 -> uploads to the MLflow run (pure + the upload).

The rank copied the file beside the attempt's events (the event names the copy) or, without shared disk, sent its
bytes inside the event (:mod:`nbtrain.runtime.trackers`). The forwarder uploads an entry's files before it moves
the entry's mark, so a crash between the two uploads the same file again to the same artifact path (same result).
"""

from __future__ import annotations

import base64
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from nbtrain.events import Event, EventKind

if TYPE_CHECKING:
    from nbtrain.tracking.sink import MlflowSink

__all__ = ["UserFile", "upload", "user_file"]


@dataclass(frozen=True)
class UserFile:
    """One file to upload: its bytes' place (``path``) or the bytes (``data``), its name and artifact directory."""

    name: str
    artifact_path: str | None
    path: Path | None = None
    data: bytes | None = None


def _clean(text: str) -> str:
    return "/".join(p for p in PurePosixPath(text).parts if p not in ("/", ".", ".."))


def user_file(event: Event, run_dir: Path) -> UserFile | None:
    """The file an ARTIFACT event of rank 0 names; None for other events and for paths outside ``run_dir``
    (an event names only copies the rank made inside the run's directory: anything else is not uploaded)."""
    if event.kind is not EventKind.ARTIFACT or event.rank != 0:
        return None
    data = event.data
    name = PurePosixPath(str(data.get("name") or "artifact")).name or "artifact"
    folder = _clean(str(data.get("artifact_path") or "")) or None
    if data.get("path"):
        path = Path(str(data["path"])).resolve()
        if not path.is_relative_to(run_dir.resolve()):
            return None
        return UserFile(name, folder, path=path)
    if data.get("data_b64"):
        return UserFile(name, folder, data=base64.b64decode(str(data["data_b64"])))
    return None


def upload(sink: MlflowSink, run_id: str, file: UserFile) -> None:
    """Upload ``file`` to ``run_id`` under its artifact directory, as ``file.name``; a copy gone missing (the run's
    directory cleaned) is skipped."""
    if file.path is not None:
        if file.path.is_file():
            sink.upload(run_id, file.path, file.artifact_path)
        return
    with tempfile.TemporaryDirectory(prefix="nbtrain-artifact-") as tmp:
        local = Path(tmp) / file.name
        local.write_bytes(file.data or b"")
        sink.upload(run_id, local, file.artifact_path)
