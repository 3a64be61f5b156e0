"""The run store is private to its user: pickled notebook data, logs and results are not for other accounts.

On a shared GPU host the default umask (022) would leave every directory 0755 and every file 0644: any
user could read another's bundles (objects.pkl is notebook data), logs and result.pkl. The store makes
every directory it (or its supervisor and ranks) creates 0700 and every file 0600, whatever the umask;
a job directory exported for sharing keeps the user's umask.
"""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

import pytest
from perms import wide

from nbtrain.bundle import capture_cell
from nbtrain.spec import JobSpec
from nbtrain.store import RunRecord, Store, write_json_atomic


def test_a_new_store_is_private(tmp_path: Path, umask022: None) -> None:
    store = Store(tmp_path / "home")
    store.ensure_writable()
    run_id = store.new_run_id("digits")
    store.save(RunRecord(run_id, JobSpec(), "0" * 64, "local"))
    write_json_atomic(store.attempt_dir(run_id, 0) / "plan.json", {"x": 1})  # parents created on the way
    assert stat.S_IMODE(store.root.stat().st_mode) == 0o700
    assert wide(store.root) == []


def test_an_existing_wide_home_is_tightened_once_with_a_warning(tmp_path: Path, umask022: None) -> None:
    root = tmp_path / "home"
    root.mkdir(mode=0o755)
    root.chmod(0o755)
    with pytest.warns(UserWarning, match=r"0755.*0700"):
        Store(root).ensure_writable()
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second time there is nothing to say
        Store(root).ensure_writable()


def test_bundles_are_private(tmp_path: Path, umask022: None) -> None:
    extra = tmp_path / "vocab.txt"
    extra.write_text("a b c\n")
    from nbtrain.bundle import CaptureOptions

    bundle = capture_cell("print(len(OBJ))\n", {"OBJ": object()}, options=CaptureOptions(extra_files=(str(extra),)))
    store = Store(tmp_path / "home")
    store.ensure_writable()
    directory = bundle.write(store.bundles)
    assert (directory / "objects.pkl").is_file() and (directory / "files" / "vocab.txt").is_file()
    assert wide(store.root) == []


def test_the_kubernetes_mirror_writes_private_files(tmp_path: Path, umask022: None) -> None:
    from nbtrain.backends.kubernetes.files import AttemptFiles
    from nbtrain.events import Event, EventKind

    store = Store(tmp_path / "home")
    store.ensure_writable()
    run_id = store.new_run_id("k8s")
    files = AttemptFiles(store.attempt_dir(run_id, 0))
    assert files.try_lock()
    try:
        files.append_lines("rank-0", ["hello"])
        files.append_events([Event(kind=EventKind.NOTICE, source="rank-0", seq=0, time=0.0, rank=0, attempt=0,
                                   data={"message": "hi"})])
        files.position("uid-1", "pod-0", 0)
        files.save_positions()
        files.write_status({"state": "running"})
        files.request_cancel()
    finally:
        files.release()
    assert wide(store.root) == []


@pytest.mark.parametrize(("umask", "directory", "file"), [(0o022, 0o755, 0o644), (0o077, 0o700, 0o600),
                                                           (0o027, 0o750, 0o640)], ids=oct)
def test_an_exported_job_directory_keeps_the_users_umask(tmp_path: Path, umask: int, directory: int,
                                                         file: int) -> None:
    """Before: the job directory itself was always made 0755, even under umask 077."""
    from nbtrain.export.jobdir import JobFiles, write_job_dir

    old = os.umask(umask)
    try:
        out = write_job_dir(JobFiles(files={"train.py": b"print(1)\n", "k8s/job.yaml": b"kind: Job\n"},
                                     digest="0" * 64), tmp_path / "job")
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == directory
    assert stat.S_IMODE((out / "train.py").stat().st_mode) == file
    assert stat.S_IMODE((out / "k8s").stat().st_mode) == directory


# A real 1x2 CPU gang that logs, emits metrics, checkpoints inside its run directory and returns a result.
CELL = '''
import nbtrain
from accelerate import Accelerator
accelerator = Accelerator()
print("rank", accelerator.process_index, "says hello", flush=True)
accelerator.log({"loss": 1.0}, step=0)
nbtrain.save_checkpoint(accelerator, 0)
{"world": accelerator.num_processes, "secret": "notebook data"}
'''


@pytest.mark.slow
def test_a_real_gang_leaves_nothing_readable_by_others(home: Path, umask022: None) -> None:
    from nbtrain.client import submit_bundle

    store = Store(home)
    run = submit_bundle(capture_cell(CELL, {"__name__": "__main__"}),
                        JobSpec(name="private", nodes=1, procs_per_node=2, device="cpu", tracking=False), store=store)
    assert run.result(timeout=180) == {"world": 2, "secret": "notebook data"}
    run_dir = store.run_dir(run.id)
    attempt = store.attempt_dir(run.id, 0)
    for expected in ("record.json", "attempts/0/plan.json", "attempts/0/status.json", "attempts/0/result.pkl",
                     "attempts/0/logs/rank-0.log", "attempts/0/logs/node-0.log", "attempts/0/events/rank-1.jsonl",
                     "attempts/0/supervisor.log"):
        assert (run_dir / expected).is_file(), expected
    assert any((run_dir / "checkpoints").rglob("manifest.json")), "the cell checkpointed inside the run directory"
    assert attempt.is_dir()
    assert wide(home) == []
