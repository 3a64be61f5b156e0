"""Files logged through ``get_tracker("mlflow")`` reach MLflow only from inside the run's directory, and tracker
plug-ins are chosen by ``NBTRAIN_TRACKERS`` or their own ``enabled()``."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from nbtrain.events import Event, EventKind
from nbtrain.tracking.plugins import enabled_plugins
from nbtrain.tracking.userfiles import user_file


def _artifact(rank: int = 0, **data: object) -> Event:
    return Event(EventKind.ARTIFACT, f"rank-{rank}", 1, 0.0, rank=rank, data=dict(data))


def test_a_copy_inside_the_run_directory_is_uploaded_under_its_folder(tmp_path: Path) -> None:
    copy = tmp_path / "attempts" / "0" / "artifacts" / "r0-1-0" / "notes.txt"
    copy.parent.mkdir(parents=True)
    copy.write_text("x")
    found = user_file(_artifact(path=str(copy), name="notes.txt", artifact_path="../extra/./"), tmp_path)
    assert found is not None and found.path == copy.resolve() and found.artifact_path == "extra"


def test_a_path_outside_the_run_directory_or_another_ranks_event_is_not_uploaded(tmp_path: Path) -> None:
    assert user_file(_artifact(path="/etc/passwd", name="passwd"), tmp_path) is None
    assert user_file(_artifact(path=str(tmp_path / ".." / "x"), name="x"), tmp_path) is None
    assert user_file(_artifact(rank=1, path=str(tmp_path / "a"), name="a"), tmp_path) is None


def test_bytes_sent_inside_the_event_keep_only_the_files_base_name(tmp_path: Path) -> None:
    event = _artifact(data_b64=base64.b64encode(b"png").decode(), name="../../curve.png", artifact_path="plots")
    found = user_file(event, tmp_path)
    assert found is not None and found.data == b"png" and found.name == "curve.png" and found.artifact_path == "plots"


def test_plugins_are_picked_by_name_and_an_unknown_name_says_which_are_installed() -> None:
    assert enabled_plugins({"NBTRAIN_TRACKERS": "none"}) == {}
    with pytest.raises(ValueError, match="no tracker plug-in named nope is installed"):
        enabled_plugins({"NBTRAIN_TRACKERS": "nope"})
