"""Bundle.write (atomic, content-addressed) and verify_bundle (the worker's first check)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nbtrain.bundle import Bundle, capture_cell, verify_bundle
from nbtrain.errors import BundleIntegrityError


@pytest.fixture
def written(tmp_path: Path) -> tuple[Bundle, Path]:
    import numpy as np

    bundle = capture_cell("arr.sum() * K\n", {"arr": np.arange(4), "K": 2})
    return bundle, bundle.write(tmp_path / "bundles")


def test_write_is_content_addressed_and_verifies(written: tuple[Bundle, Path]) -> None:
    bundle, directory = written
    assert directory.name == bundle.digest
    assert sorted(p.name for p in directory.iterdir()) == ["main.py", "manifest.json", "objects.pkl"]
    assert (directory / "manifest.json").read_bytes() == bundle.manifest_bytes
    assert verify_bundle(directory) == dict(bundle.manifest)
    assert verify_bundle(directory, bundle.digest)["kind"] == "cell"
    assert not [p for p in directory.parent.iterdir() if p.name.endswith(".tmp")]


def test_writing_again_keeps_the_existing_directory(written: tuple[Bundle, Path]) -> None:
    bundle, directory = written
    marker = (directory / "main.py").stat().st_mtime_ns
    assert bundle.write(directory.parent) == directory
    assert (directory / "main.py").stat().st_mtime_ns == marker


def test_flipped_byte_is_detected(written: tuple[Bundle, Path]) -> None:
    _, directory = written
    data = bytearray((directory / "objects.pkl").read_bytes())
    data[len(data) // 2] ^= 0x01
    (directory / "objects.pkl").write_bytes(bytes(data))
    with pytest.raises(BundleIntegrityError) as caught:
        verify_bundle(directory)
    message = str(caught.value)
    expected = json.loads((directory / "manifest.json").read_text())["files"]["objects.pkl"]
    assert "objects.pkl has sha256" in message and f"expected {expected}" in message
    assert "run the cell again" in message


def test_edited_main_py_is_detected(written: tuple[Bundle, Path]) -> None:
    _, directory = written
    path = directory / "main.py"
    path.write_text(path.read_text().replace("K = 2", "K = 3"))
    with pytest.raises(BundleIntegrityError, match=r"main\.py has sha256"):
        verify_bundle(directory)


def test_missing_file_is_detected(written: tuple[Bundle, Path]) -> None:
    _, directory = written
    (directory / "objects.pkl").unlink()
    with pytest.raises(BundleIntegrityError, match=r"objects\.pkl is missing"):
        verify_bundle(directory)


def test_extra_file_is_detected(written: tuple[Bundle, Path]) -> None:
    _, directory = written
    (directory / "files").mkdir()
    (directory / "files" / "sneaky.py").write_text("print('hi')\n")
    with pytest.raises(BundleIntegrityError, match=r"files/sneaky\.py is not listed in the manifest"):
        verify_bundle(directory)


def test_tampered_manifest_or_wrong_digest_is_detected(written: tuple[Bundle, Path], tmp_path: Path) -> None:
    bundle, directory = written
    with pytest.raises(BundleIntegrityError, match=f"expected {'0' * 64}"):
        verify_bundle(directory, "0" * 64)
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["files"]["main.py"] = "f" * 64
    (directory / "manifest.json").write_text(json.dumps(manifest, sort_keys=True, indent=2) + "\n")
    with pytest.raises(BundleIntegrityError, match=f"expected {bundle.digest}"):
        verify_bundle(directory)  # the directory name is the digest
    with pytest.raises(BundleIntegrityError, match="does not exist"):
        verify_bundle(tmp_path / "nowhere")


def test_unsafe_paths_in_a_forged_manifest_are_refused(tmp_path: Path) -> None:
    directory = tmp_path / "forged"
    directory.mkdir()
    manifest = {"format": 1, "files": {"../outside": "0" * 64}, "sizes": {}}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleIntegrityError, match=r"unsafe path '\.\./outside'"):
        verify_bundle(directory)


def test_verify_runs_without_cloudpickle_or_ipython(written: tuple[Bundle, Path]) -> None:
    _, directory = written
    script = (
        "import sys\n"
        "from nbtrain.bundle.reader import verify_bundle\n"
        f"verify_bundle({str(directory)!r})\n"
        "print(sorted({'cloudpickle', 'IPython', 'numpy', 'torch', 'pickle'} & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
