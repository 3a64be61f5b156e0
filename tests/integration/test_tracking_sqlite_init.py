"""A new SQLite MLflow store opened by several processes at once: one creates its tables, the others find them.

MLflow runs its schema migrations on a store's first use; two tracking agents (a sweep's concurrent trials, two
runs started together) doing that at once collided in the migrations before nbtrain serialized it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from nbtrain.tracking.sink import sqlite_path

OPEN_AND_LOG = """
import sys
from nbtrain.tracking.sink import MlflowSink
sink = MlflowSink(sys.argv[1])
experiment = sink.experiment_id("together")
print("ok", experiment)
"""


def test_sqlite_path_reads_absolute_and_relative_uris() -> None:
    assert sqlite_path("sqlite:////tmp/x/mlflow.db") == Path("/tmp/x/mlflow.db")
    assert sqlite_path("sqlite:///mlflow.db?timeout=5") == Path("mlflow.db")
    assert sqlite_path("http://127.0.0.1:5000") is None
    assert sqlite_path("sqlite:///:memory:") is None


def test_three_processes_open_a_new_sqlite_store_at_once(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    procs = [subprocess.Popen([sys.executable, "-c", OPEN_AND_LOG, uri], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    try:
        outputs = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-3000:]
        assert out.startswith("ok "), (out, err[-2000:])
    assert len({out.split()[1] for out, _ in outputs}) == 1  # one experiment, found by all three
