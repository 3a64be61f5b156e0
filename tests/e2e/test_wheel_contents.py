"""The wheel built from a clean copy of the repository carries the prebuilt JupyterLab extension, and
installing it (pip only) makes `jupyter labextension list` and `jupyter server extension list` show
nbtrain enabled.

"Clean copy": the files a fresh clone would have (git's tracked files plus new files it does not ignore),
so no node_modules/, no prebuilt nbtrain/labextension/: the wheel build hook (hatch-jupyter-builder)
must run `npm install` and `npm run build:lab` itself. Needs npm and the package registries (~30 s with
a warm npm cache).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SHARE = "share/jupyter/labextensions/nbtrain"


def clean_copy(dest: Path) -> None:
    """Copy what a fresh clone of the working tree would hold (read-only use of git)."""
    listing = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO, check=True, capture_output=True,
    ).stdout.decode()
    for name in filter(None, listing.split("\0")):
        source = REPO / name
        if source.is_file():  # a tracked file deleted in the working tree is not copied
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def run(argv: list[str], env: dict[str, str] | None = None) -> str:
    """Run ``argv``; its stdout and stderr without colour codes (fails the test on a non-zero exit)."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, f"{argv} failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("npm") is None or shutil.which("git") is None:
        pytest.skip("building the wheel needs npm (the JupyterLab extension is built by the wheel's build hook) and git")
    base = tmp_path_factory.mktemp("wheel")
    source, dist = base / "source", base / "dist"
    source.mkdir()
    clean_copy(source)
    assert not (source / "nbtrain" / "labextension").exists(), "the prebuilt extension must not be committed"
    env = {k: v for k, v in os.environ.items() if k not in ("SKIP_JUPYTER_BUILDER", "HATCH_JUPYTER_BUILDER_SKIP_NPM")}
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-w", str(dist),
         str(source)], env=env)
    (built,) = dist.glob("nbtrain-*.whl")
    return built


def test_wheel_carries_the_prebuilt_lab_extension(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        data = next(n.split("/data/")[0] + "/data/" for n in names if ".data/data/" in n)
        ours = sorted(n[len(data) + len(SHARE) + 1:] for n in names if n.startswith(f"{data}{SHARE}/"))
        package = json.loads(archive.read(f"{data}{SHARE}/package.json"))
        install = json.loads(archive.read(f"{data}{SHARE}/install.json"))
        schema = json.loads(archive.read(f"{data}{SHARE}/schemas/nbtrain/plugin.json"))
        assert f"{data}etc/jupyter/jupyter_server_config.d/nbtrain.json" in names
    assert package["name"] == "nbtrain"
    load = package["jupyterlab"]["_build"]["load"]  # written by @jupyter/builder: the federated entry point
    assert load in ours and load.startswith("static/remoteEntry."), ours
    assert "static/style.js" in ours, ours
    assert install["packageName"] == "nbtrain"
    toolbar = [item["command"] for item in schema["jupyter.lab.toolbars"]["Notebook"]]
    assert toolbar == ["nbtrain:run-cell-distributed", "nbtrain:export-notebook"]
    assert not [n for n in names if n.startswith("nbtrain/labextension/")], "the extension is shipped twice"
    # the built-in templates (nbtrain templates list) are package data
    builtin = sorted(p.name for p in (Path(__file__).resolve().parents[2] / "nbtrain/profiles/builtin").glob("*.toml"))
    assert builtin and sorted(n.rsplit("/", 1)[1] for n in names if n.startswith("nbtrain/profiles/builtin/")) == builtin


def test_pip_install_enables_both_extensions(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)])
    python = venv / "bin" / "python"
    if sys.prefix != sys.base_prefix:
        # the tests run in a venv (CI makes one): --system-site-packages reaches only the base interpreter's
        # packages, so the test environment's own (jupyterlab, jupyter_server) are added as plain path entries;
        # the wheel installed below comes first, and the outer editable install's finder is not activated
        inner = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip().splitlines()[-1]
        outer = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
        (Path(inner) / "nbtrain-test-env.pth").write_text("".join(f"{path}\n" for path in sorted(outer)))
    run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed",
         "--disable-pip-version-check", str(wheel)])
    env = {k: v for k, v in os.environ.items() if k != "JUPYTER_PATH"}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", JUPYTER_PLATFORM_DIRS="1",
               JUPYTER_DATA_DIR=str(tmp_path / "data"), JUPYTER_CONFIG_DIR=str(tmp_path / "config"))
    labextensions = run([str(python), "-m", "jupyterlab.labextensions", "list"], env=env)
    line = next((ln for ln in labextensions.splitlines() if ln.strip().startswith("nbtrain ")), "")
    assert "enabled" in line and "OK" in line and "(python, nbtrain)" in line, labextensions
    server = run([str(python), "-m", "jupyter_server.extension.serverextension", "list"], env=env)
    assert re.search(r"^\s*nbtrain enabled$", server, re.MULTILINE), server
    assert re.search(r"^\s*nbtrain \S+ OK$", server, re.MULTILINE), server
