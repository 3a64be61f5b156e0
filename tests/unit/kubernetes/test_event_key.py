"""The attempt's event key in the store: a 0600 file, read back as a key or not at all; lookups say why they fail."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from nbtrain.backends.base import RunHandle
from nbtrain.backends.kubernetes import KubeOptions, KubernetesBackend
from nbtrain.backends.kubernetes.files import KEY_FILE, AttemptFiles
from nbtrain.errors import NbtrainError
from nbtrain.store import Store

KEY = bytes(range(32))


def test_the_key_file_is_private_whatever_the_umask_and_replaced_atomically(tmp_path: Path) -> None:
    files = AttemptFiles(tmp_path / "attempts" / "0")
    old = os.umask(0)
    try:
        files.write_key(bytes(32))
        files.write_key(KEY)
    finally:
        os.umask(old)
    path = files.root / KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == KEY.hex() + "\n"
    assert files.read_key() == KEY
    assert [p.name for p in files.root.iterdir()] == [KEY_FILE]  # no temporary file left behind


def test_a_missing_garbled_or_linked_key_file_is_no_key(tmp_path: Path) -> None:
    files = AttemptFiles(tmp_path)
    assert files.read_key() is None
    (tmp_path / KEY_FILE).write_text("not a key\n")
    assert files.read_key() is None
    (tmp_path / KEY_FILE).unlink()
    (tmp_path / "elsewhere").write_text(KEY.hex())
    (tmp_path / KEY_FILE).symlink_to(tmp_path / "elsewhere")
    assert files.read_key() is None


def test_the_backend_reads_the_key_from_the_store_first_and_says_why_when_it_has_none(tmp_path: Path) -> None:
    store = Store(tmp_path / "home")
    backend = KubernetesBackend(store, options=KubeOptions(image="img:1"))
    handle = RunHandle("kubernetes", "r-0a1b2c", {"attempt": 0, "namespace": "ml", "name": "r-0a1b2c"})
    with pytest.raises(NbtrainError, match="without an event key"):
        backend.event_key(handle)  # submitted by an nbtrain before event keys: nothing to authenticate with
    AttemptFiles(store.attempt_dir("r-0a1b2c", 0)).write_key(KEY)
    assert backend.event_key(handle) == KEY  # no API call: the store is enough
