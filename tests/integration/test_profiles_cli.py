"""Profiles end to end: a platform team's profile shipped as a real pip-installed package is listed and used by
`nbtrain submit`, its locked option refused there and in %%distributed, and --dry-run says where values came from."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from IPython.core.error import UsageError
from nbformat.v4 import new_code_cell, new_notebook
from plugin_package import install_plugin_package, nbtrain_with

pytestmark = pytest.mark.slow

TEAM_MODULE = '''
PROFILES = """
[profiles.team-gpu]
version = "3.2"
description = "the platform team's approved shape"
contact = "#ml-platform"
locked = ["strategy", "max-restarts"]

[profiles.team-gpu.options]
nodes = 1
gpus = 2
strategy = "ddp"
max-restarts = 2
keep-checkpoints = 1
"""


def profiles():
    return PROFILES
'''


def _install_team_package(tmp_path: Path) -> Path:
    """Build and pip-install (into a target directory) a distribution declaring an `nbtrain.profiles` entry point."""
    return install_plugin_package(tmp_path, name="team-profiles", version="1.4", module="team_profiles",
                                  source=TEAM_MODULE, group="nbtrain.profiles", entry="team", target="team_profiles:profiles")


def test_a_packaged_profile_is_listed_used_and_its_lock_holds(home: Path, tmp_path: Path) -> None:
    site = _install_team_package(tmp_path)
    listed = nbtrain_with(site, tmp_path, "templates", "list")
    assert listed.returncode == 0, listed.stderr
    (row,) = [line for line in listed.stdout.splitlines() if line.startswith("team-gpu ")]
    assert "3.2" in row and "package" in row and "approved shape" in row
    shown = nbtrain_with(site, tmp_path, "templates", "show", "team-gpu")
    assert "package team-profiles 1.4 (entry point team = team_profiles:profiles)" in shown.stdout, shown.stdout
    assert "--strategy" in shown.stdout and "(locked)" in shown.stdout

    notebook = tmp_path / "job.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("%%distributed --nodes 1 --gpus 1 --name job\nprint('hi')")]),
                   str(notebook))
    exported = nbtrain_with(site, tmp_path, "export", str(notebook), "-o", str(tmp_path / "job"))
    assert exported.returncode == 0, exported.stderr

    planned = nbtrain_with(site, tmp_path, "submit", str(tmp_path / "job"), "--profile", "team-gpu", "--gpus", "1",
                       "--dry-run")
    assert planned.returncode == 0, planned.stderr
    lines = planned.stdout.splitlines()
    assert any(line.split()[:2] == ["--gpus", "1"] and line.endswith("flag") for line in lines), planned.stdout
    assert any(line.split()[:2] == ["--max-restarts", "2"] and line.endswith("profile team-gpu 3.2, locked")
               for line in lines), planned.stdout
    assert any(line.split()[:2] == ["--keep-checkpoints", "1"] and line.endswith("profile team-gpu 3.2")
               for line in lines), planned.stdout
    assert any(line.split()[:2] == ["--name", "job"] and line.endswith("nbtrain.toml") for line in lines), planned.stdout

    refused = nbtrain_with(site, tmp_path, "submit", str(tmp_path / "job"), "--profile", "team-gpu", "--max-restarts", "0")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith("nbtrain submit: --max-restarts 0: profile 'team-gpu' (version 3.2, package "
                                     "team-profiles 1.4"), refused.stderr
    assert "locks max-restarts to 2; nothing was started" in refused.stderr and "ask #ml-platform" in refused.stderr
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())

    unknown = nbtrain_with(site, tmp_path, "submit", str(tmp_path / "job"), "--profile", "team-cpu")
    assert unknown.returncode == 2 and "no such profile; known profiles:" in unknown.stderr
    assert "team-gpu" in unknown.stderr

    # a broken profile file in the user's config is reported (exit 2) without hiding the others
    (tmp_path / "no-config" / "profiles").mkdir(parents=True)
    (tmp_path / "no-config" / "profiles" / "mine.toml").write_text('version = "1"\n[options]\ngpu = 2\n')
    broken = nbtrain_with(site, tmp_path, "templates", "list")
    assert broken.returncode == 2 and "team-gpu" in broken.stdout, broken.stdout
    assert "error: profile 'mine' (" in broken.stdout and "mine.toml): unknown option 'gpu'" in broken.stdout


def test_the_magic_refuses_a_locked_override_and_shows_provenance(shell: object, home: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    run_cell_magic = shell.run_cell_magic  # type: ignore[attr-defined]
    with pytest.raises(UsageError) as error:
        run_cell_magic("distributed", "--profile multinode-ddp --strategy fsdp", "x = 1")
    assert str(error.value).startswith("--strategy fsdp: profile 'multinode-ddp' (version 1.0, built-in ")
    assert "locks strategy to ddp; nothing was started" in str(error.value)
    with pytest.raises(UsageError, match="--profile would be ignored"):
        run_cell_magic("distributed", "--resume some-run --profile multinode-ddp", "x = 1")
    capsys.readouterr()
    shell.run_line_magic("nbtrain", "templates list")  # type: ignore[attr-defined]
    listed = capsys.readouterr().out.splitlines()
    assert any(line.split()[:3] == ["multinode-ddp", "1.0", "built-in"] for line in listed), listed
    run_cell_magic("distributed", "--profile multinode-ddp --gpus 1 --dry-run", "x = 1")
    out = capsys.readouterr().out
    assert "Where each value came from" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("  --")}
    assert rows["--nodes"].endswith("profile multinode-ddp 1.0") and rows["--gpus"].endswith("flag")
    assert rows["--strategy"].endswith("profile multinode-ddp 1.0, locked")
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_a_run_keeps_its_profile_and_a_rerun_cannot_change_what_it_locks(shell: object, home: Path) -> None:
    shell.run_cell_magic("distributed", "--profile multinode-ddp --nodes 1 --gpus 1 --no-monitor --out run",  # type: ignore[attr-defined]
                         "x = 1")
    run = shell.user_ns["run"]  # type: ignore[attr-defined]
    assert run.wait(timeout=240, progress=False).value == "succeeded"
    from nbtrain.store import Store

    assert Store(home).load(run.id).profile == "multinode-ddp 1.0"  # nbtrain stats counts it as a template run
    with pytest.raises(UsageError) as error:
        shell.run_line_magic("nbtrain", f"rerun {run.id} --strategy fsdp")  # type: ignore[attr-defined]
    assert "--strategy fsdp: profile 'multinode-ddp' (version 1.0, built-in " in str(error.value)
    assert "locks strategy to ddp; nothing was started" in str(error.value)
    assert [r.name for r in (home / "runs").iterdir()] == [run.id]  # the refused rerun left nothing
