"""Local modules travel in the bundle: a module or package next to the notebook that the cell's imports or pickled
objects come from (and the local modules it imports), not what is installed, not the interpreter's, not nbtrain."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nbtrain.bundle import capture_cell
from nbtrain.bundle.localmods import local_module_files

NAMES = ("nbt_lm_single", "nbt_lm_helper", "nbt_lm_pkg", "nbt_lm_pkg.inner", "nbt_lm_unused")


@pytest.fixture
def notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "nbt_lm_single.py").write_text("import json\nfrom nbt_lm_helper import K\n\ndef f(x):\n    return x + K\n")
    (tmp_path / "nbt_lm_helper.py").write_text("K = 1\n")
    (tmp_path / "nbt_lm_unused.py").write_text("X = 1\n")
    package = tmp_path / "nbt_lm_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from .inner import Model\n")
    (package / "inner.py").write_text("class Model:\n    def __init__(self):\n        self.w = 3\n")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "inner.cpython-311.pyc").write_bytes(b"\0")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in NAMES:
        sys.modules.pop(name, None)


def test_a_local_module_and_what_it_imports_locally_are_shipped(notebook: Path) -> None:
    import nbt_lm_unused  # type: ignore[import-not-found]  # noqa: F401 - local, but the cell does not use it
    from nbt_lm_single import f  # type: ignore[import-not-found]

    files = local_module_files([f, json, pytest])
    assert files == {"modules/nbt_lm_single.py": (notebook / "nbt_lm_single.py").read_bytes(),
                     "modules/nbt_lm_helper.py": b"K = 1\n"}  # not json (stdlib), pytest (installed), the unused one


def test_a_local_package_ships_whole_for_a_pickled_instance_and_the_bundle_runs_it(notebook: Path) -> None:
    from nbt_lm_pkg import Model  # type: ignore[import-not-found]

    bundle = capture_cell("model.w * 14\n", {"__name__": "__main__", "model": Model()})
    shipped = sorted(p for p in bundle.files if p.startswith("modules/"))
    assert shipped == ["modules/nbt_lm_pkg/__init__.py", "modules/nbt_lm_pkg/inner.py"]
    assert "local modules (in modules/, on sys.path when this runs)" in bundle.main_source
    assert set(json.loads(bundle.manifest_bytes)["files"]) >= set(shipped)  # digested like every file


def test_nothing_of_nbtrain_or_the_interpreter_is_shipped_from_a_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    import nbtrain

    monkeypatch.chdir(Path(nbtrain.__file__).resolve().parents[1])  # as if the notebook sat in nbtrain's checkout
    assert local_module_files([nbtrain, capture_cell, json, pytest]) == {}
