"""What the kernel and the Jupyter server write into the store is private too, under the user's umask (022).

Before: the event writer (events/kubernetes.jsonl, restart.jsonl, observer.jsonl, written by the kernel or the
server, which run under the user's umask rather than the ranks' 077) made its directories with the umask's mode
and its files 0644; the Kubernetes backend wrote manifests.yaml 0644 and made the attempt directory with the
umask's mode (0755) before the event key went in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from perms import wide

from nbtrain.events import EventKind, EventWriter
from nbtrain.store import Store


def test_the_event_writer_makes_private_directories_and_files(tmp_path: Path, umask022: None) -> None:
    store = Store(tmp_path / "home")
    store.ensure_writable()
    run_id = store.new_run_id("observer")
    writer = EventWriter(store.attempt_dir(run_id, 0) / "events" / "observer.jsonl", "observer")
    writer.emit(EventKind.NOTICE, message="the supervisor is gone")
    writer.close()
    assert (store.attempt_dir(run_id, 0) / "events" / "observer.jsonl").is_file()
    assert wide(store.root) == []


@pytest.mark.slow
def test_a_kubernetes_run_leaves_nothing_readable_by_others(umask022: None, home: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("kubernetes", reason="the kubernetes client is not installed")
    from kubefixtures import kubernetes_fixtures  # tests/support, put on sys.path by tests/conftest.py

    from nbtrain.backends.kubernetes import KubernetesBackend
    from nbtrain.bundle import capture_cell
    from nbtrain.client import submit_bundle
    from nbtrain.model import RunState
    from nbtrain.spec import JobSpec

    with kubernetes_fixtures().running_cluster(tmp_path, monkeypatch):
        backend: Any = KubernetesBackend(Store(home))
        bundle = capture_cell("print('hello', flush=True)\n{'secret': 'notebook data'}\n", {"__name__": "__main__"})
        run = submit_bundle(bundle, JobSpec(name="private", backend="kubernetes"), store=backend.store,
                            backend=backend)
        assert run.wait(timeout=150, progress=False) is RunState.SUCCEEDED
        assert run.result() == {"secret": "notebook data"}
        attempt = home / "runs" / run.id / "attempts" / "0"
        for expected in ("manifests.yaml", "event.key", "events/kubernetes.jsonl", "logs/rank-0.log"):
            assert (attempt / expected).is_file(), expected
        assert wide(home) == []
