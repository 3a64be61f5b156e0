"""An exported job names the profile its cell used, and ``nbtrain submit`` holds that profile's locks again: a flag
or an edited nbtrain.toml that changes a locked value is refused, as is a profile no longer installed or of
another version (naming both); unlocked values stay as nbtrain.toml has them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from nbtrain.cli import main
from nbtrain.errors import SpecError
from nbtrain.export.jobdir import load_job
from nbtrain.export.manifests import Manifests
from nbtrain.export.static import export_notebook
from nbtrain.profiles import parse_profile
from nbtrain.profiles.locks import installed_profile, lock_mismatches
from nbtrain.spec import JobSpec

NO_K8S = Manifests({}, {"job": "test: no backend"})


@pytest.fixture
def job_dir(notebook_file: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # no project nbtrain.toml
    monkeypatch.setenv("NBTRAIN_CONFIG_DIR", str(tmp_path / "config"))  # no user profiles
    monkeypatch.setenv("NBTRAIN_HOME", str(tmp_path / "home"))  # --dry-run stores the bundle
    path = notebook_file("%%distributed --profile multinode-ddp --gpus 1 --name locked\nprint('hi')")
    export_notebook(path, tmp_path / "job", manifests=NO_K8S)
    return tmp_path / "job"


def _edit_toml(job_dir: Path, old: str, new: str) -> None:
    toml = job_dir / "nbtrain.toml"
    text = toml.read_text()
    assert old in text
    toml.write_text(text.replace(old, new))


def _submit(job_dir: Path, *flags: str) -> int:
    return main(["submit", str(job_dir), "--dry-run", *flags])


def test_the_job_records_the_profile_of_its_cell(job_dir: Path) -> None:
    assert 'profile = "multinode-ddp 1.0"' in (job_dir / "nbtrain.toml").read_text()
    job = load_job(job_dir)
    assert job.profile == "multinode-ddp 1.0"
    assert (job.spec.nodes, job.spec.procs_per_node, job.spec.max_restarts) == (2, 1, 2)


def test_a_job_without_a_profile_records_none(notebook_file: Callable[..., Path], tmp_path: Path) -> None:
    export_notebook(notebook_file("%%distributed --gpus 1\nprint('hi')"), tmp_path / "plain", manifests=NO_K8S)
    assert load_job(tmp_path / "plain").profile is None
    assert "profile = " not in (tmp_path / "plain" / "nbtrain.toml").read_text()


def test_submit_refuses_a_flag_that_changes_a_locked_value(job_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _submit(job_dir, "--strategy", "fsdp") == 2
    err = capsys.readouterr().err
    assert "--strategy fsdp: profile 'multinode-ddp' (version 1.0" in err and "locks strategy to ddp" in err
    # unlocked values are the user's: a flag and an edited nbtrain.toml both count, the profile does not reset them
    _edit_toml(job_dir, "nodes = 2", "nodes = 3")
    assert _submit(job_dir, "--gpus", "2") == 0
    out = capsys.readouterr().out
    assert "--strategy ddp" in out and "profile multinode-ddp 1.0, locked" in out
    assert "--nodes 3" in out and "--gpus 2" in out


def test_submit_refuses_an_edited_locked_value(job_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _edit_toml(job_dir, 'strategy = "ddp"', 'strategy = "fsdp"')
    assert _submit(job_dir) == 2
    err = capsys.readouterr().err
    assert "nbtrain.toml: --strategy is fsdp; profile 'multinode-ddp' 1.0" in err and "locks it to ddp" in err
    assert _submit(job_dir, "--profile", "single-node-gpu") == 0  # submitted under another profile, on purpose
    assert "profile single-node-gpu 1.0" in capsys.readouterr().out


def test_submit_refuses_a_profile_gone_or_of_another_version(job_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _edit_toml(job_dir, 'profile = "multinode-ddp 1.0"', 'profile = "multinode-ddp 0.9"')
    assert _submit(job_dir) == 2
    err = capsys.readouterr().err
    assert "exported from profile 'multinode-ddp' version 0.9, but the installed 'multinode-ddp' is version 1.0" in err
    _edit_toml(job_dir, 'profile = "multinode-ddp 0.9"', 'profile = "team-gone 4.2"')
    assert _submit(job_dir) == 2
    err = capsys.readouterr().err
    assert "exported from profile 'team-gone' version 4.2, which is not installed here" in err
    assert "multinode-ddp" in err  # the installed ones are listed


def test_lock_mismatches_name_the_option_and_both_values() -> None:
    team = parse_profile("team", {"version": "2", "locked": ["strategy", "env", "no-tracking"],
                                  "options": {"strategy": "ddp", "no-tracking": True,
                                              "env": {"NCCL_DEBUG": "WARN", "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwx"}}},
                         "team.toml")
    good = JobSpec(strategy="ddp", tracking=False, env={"NCCL_DEBUG": "WARN", "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwx",
                                                        "EXTRA": "1"})
    assert lock_mismatches(team, good) == []  # more env names beside the locked ones are fine
    bad = lock_mismatches(team, JobSpec(strategy="fsdp", tracking=True, env={"NCCL_DEBUG": "INFO"}))
    assert [(m.flag, m.value, m.locked) for m in bad] == [
        ("--strategy", "fsdp", "ddp"),
        ("--env", "NCCL_DEBUG=INFO HF_TOKEN unset", "NCCL_DEBUG=WARN HF_TOKEN=***"),
        ("--no-tracking", "off", "on"),
    ]
    assert bad[0].describe(team) == "--strategy is fsdp; profile 'team' 2 (team.toml) locks it to ddp"
    with pytest.raises(SpecError, match=r"version 1, but the installed 'team' is version 2 \(team\.toml\)"):
        installed_profile("team 1", {"team": team}, "here")
