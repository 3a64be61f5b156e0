"""The paths rung of nbtrain validate on --checkpoint-dir: local directories and object storage alike."""

from __future__ import annotations

from pathlib import Path

import fsspec

from nbtrain.store import Store
from nbtrain.validate.ladder import Blame, Rung, Status
from nbtrain.validate.runner import _checkpoints_writable


def test_a_local_checkpoint_dir_is_created_and_written(tmp_path: Path) -> None:
    outcome = _checkpoints_writable(str(tmp_path / "ckpt"), Store(tmp_path / "home"), [])
    assert (outcome.rung, outcome.status) == (Rung.PATHS, Status.PASSED)
    assert (tmp_path / "ckpt").is_dir() and not list((tmp_path / "ckpt").iterdir())  # the probe is gone again


def test_an_object_storage_checkpoint_dir_is_probed_there_not_made_a_local_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    fs = fsspec.filesystem("memory")
    outcome = _checkpoints_writable("memory://bucket/ckpt", Store(tmp_path / "home"), [])
    assert outcome.status is Status.PASSED, outcome.message
    assert "memory://bucket/ckpt" in outcome.message
    assert not fs.find("/bucket/ckpt")  # written and removed again
    assert not (tmp_path / "memory:").exists()  # (the URL once became a local folder named 'memory:')


def test_an_unwritable_checkpoint_dir_is_the_jobs_failure_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    outcome = _checkpoints_writable(str(blocker / "ckpt"), Store(tmp_path / "home"), [])
    assert (outcome.status, outcome.blame) == (Status.FAILED, Blame.JOB)
    assert f"--checkpoint-dir {blocker / 'ckpt'} is not writable" in outcome.message
