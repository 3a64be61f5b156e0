"""A backend shipped as its own pip-installed package (entry-point group nbtrain.backends) is a backend everywhere:
`nbtrain submit --backend team` plans and runs on it, another backend's option is refused naming it, what its
Capabilities declare is honoured, and `--help` and `nbtrain doctor` list it. Nothing in nbtrain names it."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook
from plugin_package import install_plugin_package, nbtrain_with

pytestmark = pytest.mark.slow

# A real backend: the local backend's processes under another name, declaring one option of the local backend's
# own (--stall-after) and no restarts.
TEAM_MODULE = '''
from nbtrain.backends.base import Capabilities
from nbtrain.backends.local import LocalBackend


class TeamBackend(LocalBackend):
    """Runs the gang as processes on this machine, like local; honours --stall-after, never restarts."""

    name = "team"
    capabilities = Capabilities(restarts=False, checkpoints=True, gpus=False, multi_node=True, shared_store=True,
                                options=frozenset({"--stall-after"}))
'''


def _install_team_backend(tmp_path: Path) -> Path:
    """Build and pip-install (into a target directory) a distribution declaring an `nbtrain.backends` entry point."""
    return install_plugin_package(tmp_path, name="team-backend", version="0.3", module="team_backend",
                                  source=TEAM_MODULE, group="nbtrain.backends", entry="team", target="team_backend:TeamBackend")


@pytest.fixture
def team(home: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(site directory holding the installed package, an exported job directory)."""
    site = _install_team_backend(tmp_path)
    notebook = tmp_path / "job.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("%%distributed --nodes 1 --gpus 1 --name job\nprint(6 * 7)")]),
                   str(notebook))
    exported = nbtrain_with(site, tmp_path, "export", str(notebook), "-o", str(tmp_path / "job"))
    assert exported.returncode == 0, exported.stderr
    return site, tmp_path / "job"


def test_an_installed_backend_plans_refuses_the_others_options_and_is_listed(team: tuple[Path, Path],
                                                                            home: Path) -> None:
    site, job = team
    cwd = job.parent
    planned = nbtrain_with(site, cwd, "submit", str(job), "--backend", "team", "--device", "cpu", "--dry-run")
    assert planned.returncode == 0, planned.stderr
    assert "backend:   team" in planned.stdout, planned.stdout

    # what its Capabilities declare is honoured: one option of another backend, the checkpoint options
    declared = nbtrain_with(site, cwd, "submit", str(job), "--backend", "team", "--device", "cpu", "--stall-after", "60",
                        "--keep-checkpoints", "2", "--dry-run")
    assert declared.returncode == 0, declared.stderr

    refused = nbtrain_with(site, cwd, "submit", str(job), "--backend", "team", "--namespace", "team-a", "--dry-run")
    assert refused.returncode == 2 and refused.stdout == "", refused.stdout
    assert ("--namespace team-a is a Kubernetes option; the team backend does not declare it in its Capabilities: "
            "drop it or use --backend kubernetes.") in refused.stderr, refused.stderr

    # what they rule out, too: no restarts, no GPU; and a local-only option
    several = nbtrain_with(site, cwd, "submit", str(job), "--backend", "team", "--max-restarts", "2", "--device", "gpu",
                       "--warm", "--dry-run")
    assert several.returncode == 2, several.stderr
    assert "the team backend cannot honour 3 options; nothing was started:" in several.stderr, several.stderr
    assert "--device gpu: the team backend gives its ranks no GPU (its Capabilities.gpus is false)" in several.stderr
    assert ("--max-restarts 2 is an option of the local, kubernetes and slurm backends only; the team backend does "
            "not restart a failed gang (its Capabilities.restarts is false)") in several.stderr, several.stderr
    assert "--warm is an option of the local backend only; the team backend does not declare it" in several.stderr
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())

    unknown = nbtrain_with(site, cwd, "submit", str(job), "--backend", "nosuch", "--dry-run")
    assert unknown.returncode == 2
    assert ("--backend: unknown value 'nosuch'; the installed backends are: kubernetes, local, slurm, team. "
            in unknown.stderr), unknown.stderr
    assert "entry-point group 'nbtrain.backends'" in unknown.stderr

    helped = nbtrain_with(site, cwd, "submit", "--help")
    assert helped.returncode == 0 and "kubernetes|local|slurm|team" in helped.stdout.replace("\n", ""), helped.stdout
    doctor = nbtrain_with(site, cwd, "doctor")
    (line,) = [x for x in doctor.stdout.splitlines() if " backends " in x]
    assert line.startswith("ok ") and "kubernetes, local, slurm, team (team_backend:TeamBackend)" in line, line
    assert nbtrain_with(site, cwd, "doctor", "--backend", "team").stdout.count("team_backend:TeamBackend") == 1


def test_a_run_on_the_installed_backend_finishes_and_is_listed_under_its_name(team: tuple[Path, Path]) -> None:
    site, job = team
    done = nbtrain_with(site, job.parent, "submit", str(job), "--backend", "team", "--device", "cpu", "--wait", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    listed = nbtrain_with(site, job.parent, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert '"backend": "team"' in listed.stdout, listed.stdout
