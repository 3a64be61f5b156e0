"""`nbtrain logs RUN --all`: which attempts go in the zip."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from nbtrain.commands._logszip import _attempts
from nbtrain.store import Store


def test_automatic_restarts_are_in_the_zip_though_the_record_lists_only_submits_and_resumes(tmp_path: Path) -> None:
    store = Store(tmp_path / "home")
    for attempt in (0, 1, 2):  # 0 submitted, 1 an automatic restart (no record entry), 2 a resume
        store.attempt_dir("run-1", attempt).mkdir(parents=True)
    run = SimpleNamespace(id="run-1", store=store,
                          record=SimpleNamespace(attempts=[{"attempt": 0}, {"attempt": 2, "kind": "resume"}]))
    assert _attempts(run) == [0, 1, 2]
    fresh = SimpleNamespace(id="run-2", store=store, record=SimpleNamespace(attempts=[]))
    assert _attempts(fresh) == [0]  # nothing on disk yet: the first attempt's (empty) logs
