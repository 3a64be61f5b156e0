"""``nbtrain validate JOBDIR --profile NAME``: the config rung fails a job that does not meet the profile's locks,
naming the option, the job's value and the locked one (blame: the job); a job exported from a profile is checked
against it without --profile. Only the config rung matters here: a failed config skips every gang."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from nbtrain.cli import main
from nbtrain.export.manifests import Manifests
from nbtrain.export.static import export_notebook
from nbtrain.profiles import load_catalog
from nbtrain.validate.ladder import Blame, Rung, Status
from nbtrain.validate.runner import Settings, _config, _State, validate_job


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    """``job(header)``: a job directory exported from a cell with ``%%distributed HEADER``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NBTRAIN_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("NBTRAIN_HOME", str(tmp_path / "home"))

    def make(header: str, name: str = "job") -> Path:
        notebook = tmp_path / f"{name}.ipynb"
        nbformat.write(new_notebook(cells=[new_code_cell(f"%%distributed {header}\nprint('hi')")]), str(notebook))
        export_notebook(notebook, tmp_path / name, manifests=Manifests({}, {"job": "test: no backend"}))
        return tmp_path / name

    return make


def test_a_job_breaking_a_lock_fails_the_config_rung(job, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = job("--gpus 1 --strategy fsdp --max-restarts 0")
    junit = tmp_path / "report.xml"
    assert main(["validate", str(directory), "--profile", "multinode-ddp", "--junit", str(junit)]) == 1
    printed = capsys.readouterr()
    assert "FAIL config [job]" in printed.out
    assert ("--strategy is fsdp; profile 'multinode-ddp' 1.0 (built-in " in printed.err
            and "locks it to ddp" in printed.err)
    assert "max-restarts" not in printed.err  # set by the profile, not locked
    cases = {c.get("name"): c for c in ElementTree.parse(junit).getroot().iter("testcase")}
    assert cases["config"].find("failure") is not None and cases["config"].find("failure").get("type") == "job"
    assert all(cases[r.value].find("skipped") is not None for r in Rung if r is not Rung.CONFIG)


def test_a_job_meeting_the_locks_passes_the_config_rung(job) -> None:
    directory = job("--gpus 1 --strategy ddp")
    profile = load_catalog().get("multinode-ddp")
    outcome = _config(_State(directory, Settings(), profile=profile))
    assert outcome.status is Status.PASSED, outcome.message
    assert "meets the locks of profile multinode-ddp 1.0 (--strategy)" in outcome.message


def test_the_profile_a_job_was_exported_from_is_checked_without_profile(job) -> None:
    directory = job("--profile multinode-ddp --gpus 1 --max-restarts 0")  # (restarts on k8s need a --volume)
    assert "meets the locks of profile multinode-ddp 1.0" in _config(_State(directory, Settings())).message
    toml = directory / "nbtrain.toml"
    toml.write_text(toml.read_text().replace('strategy = "ddp"', 'strategy = "deepspeed"'))
    [config, *rest] = validate_job(directory, Settings())
    assert (config.status, config.blame) == (Status.FAILED, Blame.JOB)
    assert "--strategy is deepspeed; profile 'multinode-ddp' 1.0" in config.message
    assert all(o.status is Status.SKIPPED for o in rest)
    toml.write_text(toml.read_text().replace('profile = "multinode-ddp 1.0"', 'profile = "team-gone 2"'))
    [config, *_] = validate_job(directory, Settings())
    assert (config.status, config.blame) == (Status.FAILED, Blame.PLATFORM)  # this machine lacks the team's kit
    assert "profile 'team-gone' version 2, which is not installed here" in config.message


def test_an_unknown_profile_is_a_usage_error(job, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(job("--gpus 1")), "--profile", "no-such"]) == 2
    assert "--profile 'no-such': no such profile; known profiles:" in capsys.readouterr().err


def test_a_local_job_with_options_kubernetes_refuses_passes_the_config_rung(job) -> None:
    # the multinode-ddp profile sets --max-restarts, which Kubernetes honours only with a --volume
    directory = job("--profile multinode-ddp --backend local")
    outcome = _config(_State(directory, Settings()))
    assert outcome.status is Status.PASSED, outcome.message
    assert "kubernetes manifests not checked: its options do not run there as they are" in outcome.message
    assert "--volume" in outcome.message


def test_a_kubernetes_job_with_options_kubernetes_refuses_fails_the_config_rung(job) -> None:
    directory = job("--backend kubernetes --image python:3.11 --max-restarts 2")
    outcome = _config(_State(directory, Settings()))
    assert outcome.status is Status.FAILED and outcome.blame is Blame.JOB, outcome.message
    assert outcome.message.startswith("nbtrain.toml: --max-restarts 2 on the kubernetes backend needs --volume")


def _slurm_team(tmp_path: Path) -> None:
    profiles = tmp_path / "config" / "profiles"
    profiles.mkdir(parents=True, exist_ok=True)
    (profiles / "gpu-team.toml").write_text('version = "1"\nlocked = ["partition", "sbatch"]\n[options]\n'
                                            'backend = "slurm"\npartition = "gpu"\nsbatch = {mem-per-c = "4G"}\n')


@pytest.mark.parametrize(("sbatch", "named"), [
    ('{part = "nosuch"}', "--sbatch part=nosuch: sbatch reads part as --partition"),
    ('{p = "nosuch"}', "--sbatch p=: sbatch would read --p as an abbreviation of any of"),
    ('{partition = "nosuch"}', "--sbatch partition=nosuch: nbtrain sets --partition from its own option"),
    ('{mem-per-cpu = "4G", mem = "64G"}', "--sbatch is mem-per-cpu=4G mem=64G; profile 'gpu-team' 1"),
    ('{mem-per-cpu = "8G"}', "--sbatch is mem-per-cpu=8G; profile 'gpu-team' 1"),
])
def test_no_spelling_in_nbtrain_toml_routes_around_a_locked_slurm_setting(
        job, tmp_path: Path, capsys: pytest.CaptureFixture[str], sbatch: str, named: str) -> None:
    """Issue 28: the platform's CI gate fails a job whose nbtrain.toml changes a locked partition or sbatch memory
    by any spelling sbatch would accept (an abbreviation, another option setting the same thing), naming it."""
    _slurm_team(tmp_path)
    directory = job("--gpus 1 --backend slurm --partition gpu --sbatch mem-per-cpu=4G")
    toml = directory / "nbtrain.toml"
    text = toml.read_text()
    assert '[slurm.sbatch]\nmem-per-cpu = "4G"\n' in text, text
    toml.write_text(text.replace('[slurm.sbatch]\nmem-per-cpu = "4G"\n', "").replace("[slurm]\n",
                                                                                   f"[slurm]\nsbatch = {sbatch}\n"))
    assert main(["validate", str(directory), "--profile", "gpu-team"]) == 1
    printed = capsys.readouterr()
    assert "FAIL config" in printed.out and named in printed.err + printed.out, printed
