"""What the agents' interpreter and packages are (registry.environment_stamp): part of the gang key."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from nbtrain.warm import registry

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="warm gangs need Linux")


def test_installing_or_upgrading_any_package_changes_the_stamp(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    before = registry.environment_stamp(sys.executable)
    (tmp_path / "somepkg-1.0.dist-info").mkdir()
    installed = registry.environment_stamp(sys.executable)
    (tmp_path / "somepkg-1.0.dist-info").rename(tmp_path / "somepkg-1.1.dist-info")
    upgraded = registry.environment_stamp(sys.executable)
    assert len({before["distributions"], installed["distributions"], upgraded["distributions"]}) == 3
    assert registry.environment_stamp(sys.executable) == upgraded  # stable while nothing changes


def test_an_edited_source_file_of_nbtrain_changes_the_stamp(tmp_path: Path) -> None:
    # nbtrain's own tree is not edited here: the digest of a copy-like package shows the rule
    package = tmp_path / "pkg"
    (package / "sub" / "__pycache__").mkdir(parents=True)
    (package / "sub" / "mod.py").write_text("A = 1\n")
    first = registry._sources_digest(package)
    (package / "sub" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"x")
    assert registry._sources_digest(package) == first  # compiled caches do not count
    os.utime(package / "sub" / "mod.py", ns=(0, 1_000_000_000))
    assert registry._sources_digest(package) != first
    stamp = registry.environment_stamp(sys.executable)
    assert stamp["nbtrain_sources"] == registry._sources_digest(Path(registry.__file__).resolve().parents[1])


def test_another_interpreter_is_stamped_by_its_path_only() -> None:
    assert registry.environment_stamp("/opt/other/python") == {"python": "/opt/other/python"}
