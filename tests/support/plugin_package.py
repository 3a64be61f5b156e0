"""A real distribution with an entry point, pip-installed into a target directory, and the CLI run with it on the path.

Used by the tests of nbtrain's plug-in groups (``nbtrain.profiles``, ``nbtrain.backends``): what a platform team
publishes with pip, installed for real (setuptools builds it; no index is reached), not a patched entry-point list.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

__all__ = ["install_plugin_package", "nbtrain_with"]


def install_plugin_package(tmp_path: Path, *, name: str, version: str, module: str, source: str, group: str,
                           entry: str, target: str) -> Path:
    """Build ``name`` (one package ``module`` holding ``source``, entry point ``entry = target`` in ``group``) and
    pip-install it into ``tmp_path/site``; returns that directory (put it on PYTHONPATH)."""
    project = tmp_path / name
    (project / module).mkdir(parents=True)
    (project / module / "__init__.py").write_text(source)
    (project / "pyproject.toml").write_text(textwrap.dedent(f"""
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{name}"
        version = "{version}"

        [project.entry-points."{group}"]
        {entry} = "{target}"

        [tool.setuptools]
        packages = ["{module}"]
    """))
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                           "--quiet", "--target", str(site), str(project)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return site


def nbtrain_with(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m nbtrain ARGS`` in ``cwd`` with ``site`` on the path and no user-level nbtrain config."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "NBTRAIN_CONFIG_DIR": str(cwd / "no-config")}
    return subprocess.run([sys.executable, "-m", "nbtrain", *args], capture_output=True, text=True, timeout=180,
                          cwd=cwd, env=env)
