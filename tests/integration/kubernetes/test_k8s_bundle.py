"""Bundles on the fake cluster: a capture too big for one ConfigMap runs from part ConfigMaps (checked and unpacked by
the pod's preflight), a damaged part is refused before anything runs with an error naming it, and a local module the
cell imports (a .py file next to the notebook) is importable in the pods."""

from __future__ import annotations

import base64
import hashlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_cluster import NAMESPACE, FakeCluster

from nbtrain.bundle import capture_cell
from nbtrain.client import submit_bundle
from nbtrain.errors import RunFailedError
from nbtrain.model import RunState
from nbtrain.spec import JobSpec

pytestmark = pytest.mark.slow


def test_a_3mb_capture_runs_from_part_configmaps_and_the_cell_sees_the_data(cluster: FakeCluster,
                                                                            k8s_backend: Any) -> None:
    blob = os.urandom(3_000_000)
    bundle = capture_cell("import hashlib\n(len(blob), hashlib.sha256(blob).hexdigest())\n",
                          {"__name__": "__main__", "blob": blob})
    run = submit_bundle(bundle, JobSpec(name="big", nodes=2, backend="kubernetes", device="cpu"),
                        store=k8s_backend.store, backend=k8s_backend)
    assert run.wait(timeout=120, progress=False) is RunState.SUCCEEDED
    assert tuple(run.result()) == (3_000_000, hashlib.sha256(blob).hexdigest())
    parts = [c for c in cluster.store.items("configmaps", NAMESPACE) if "-part-" in c["metadata"]["name"]]
    assert len(parts) >= 3
    job = cluster.store.items("jobs.batch", NAMESPACE)[0]
    assert all(c["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"] for c in parts)  # collected with it


def test_a_damaged_part_is_refused_before_anything_runs_naming_the_part(cluster: FakeCluster, k8s_backend: Any) -> None:
    def damage(resource: str, obj: dict[str, Any]) -> None:
        if resource == "configmaps" and obj["metadata"]["name"].endswith("-part-1"):
            data = bytearray(base64.b64decode(obj["binaryData"]["part"]))
            data[7] ^= 0x01
            obj["binaryData"]["part"] = base64.b64encode(bytes(data)).decode("ascii")

    cluster.tamper = damage
    bundle = capture_cell("print('the cell ran')\nlen(blob)\n", {"__name__": "__main__", "blob": os.urandom(2_000_000)})
    run = submit_bundle(bundle, JobSpec(name="damaged", nodes=1, backend="kubernetes", device="cpu"),
                        store=k8s_backend.store, backend=k8s_backend)
    with pytest.raises(RunFailedError) as caught:
        run.wait(timeout=90, progress=False)
    failure = caught.value.failure
    assert failure is not None
    name = k8s_backend._target(run.handle).name
    assert "the bundle part " in failure.reason and "parts/001 (ConfigMap " in failure.reason, failure.reason
    assert "-part-1) does not match its digest" in failure.reason and "nothing ran" in failure.reason, failure.reason
    assert name in failure.reason
    assert "the cell ran" not in run.logs(0)
    pods = cluster.store.items("pods", NAMESPACE)
    assert all(p["status"]["containerStatuses"][0]["state"].get("terminated", {}).get("exitCode") in (4, None)
               for p in pods)


@pytest.fixture
def notebook_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A notebook's directory with two local modules, as the kernel sees it (its cwd, on sys.path)."""
    folder = tmp_path / "notebook"
    folder.mkdir()
    (folder / "nbt_mylib.py").write_text("from nbt_helper import FACTOR\n\ndef f(x):\n    return x * FACTOR\n")
    (folder / "nbt_helper.py").write_text("FACTOR = 2\n")
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    for name in ("nbt_mylib", "nbt_helper"):
        sys.modules.pop(name, None)


def test_a_local_module_the_cell_imports_is_shipped_and_importable_in_the_pods(
    cluster: FakeCluster, k8s_backend: Any, notebook_dir: Path,
) -> None:
    from nbt_mylib import f  # type: ignore[import-not-found]

    bundle = capture_cell("f(21)\n", {"__name__": "__main__", "f": f})
    assert bundle.files["modules/nbt_mylib.py"] == (notebook_dir / "nbt_mylib.py").read_bytes()
    assert "modules/nbt_helper.py" in bundle.files  # imported by nbt_mylib: shipped too
    (notebook_dir / "nbt_helper.py").write_text("FACTOR = 1000\n")  # edited after the capture: the pods run the capture
    run = submit_bundle(bundle, JobSpec(name="localmod", nodes=2, backend="kubernetes", device="cpu"),
                        store=k8s_backend.store, backend=k8s_backend)
    assert run.wait(timeout=90, progress=False) is RunState.SUCCEEDED
    assert run.result() == 42
