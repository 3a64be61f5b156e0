"""``--sbatch`` keys on a real cluster (issue 28): the real ``sbatch`` reads an abbreviation as its long option (or
refuses an ambiguous one) exactly as nbtrain's model of getopt_long says, so every abbreviation of an option
nbtrain sets or a profile locks is refused by ``nbtrain submit`` before anything reaches Slurm, and a partition a
profile locks cannot be changed by any spelling (flag, abbreviation, nbtrain.toml)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cluster import Cluster

from nbtrain.backends.slurm.sbatchopts import resolve_option
from nbtrain.bundle import capture_cell
from nbtrain.cli import main
from nbtrain.errors import SpecError
from nbtrain.export.jobdir import build_job_files, write_job_dir
from nbtrain.export.manifests import Manifests
from nbtrain.spec import JobSpec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

# The abbreviations issue 28 saw through nbtrain's guard, with a value the real sbatch can judge.
SEEN = {"out": "/tmp/x-%j.log", "chd": "/tmp", "exp": "NONE", "ntasks-per-no": "1", "part": "nosuch", "acc": "x",
        "qo": "normal"}


def _test_only(cluster: Cluster, tmp_path: Path, key: str, value: str) -> str:
    script = tmp_path / f"probe-{key}.sbatch"
    script.write_text(f"#!/bin/sh\n#SBATCH --partition=debug\n#SBATCH --nodes=1\n#SBATCH --{key}={value}\ntrue\n")
    done = cluster.client("sbatch", "--test-only", str(script))
    return done.stdout + done.stderr


def test_the_real_sbatch_reads_each_abbreviation_as_nbtrain_resolves_it(slurm_cluster: Cluster,
                                                                         tmp_path: Path) -> None:
    for key, value in SEEN.items():
        said = _test_only(slurm_cluster, tmp_path, key, value)
        try:
            option = resolve_option(key)
        except SpecError as error:  # ambiguous for nbtrain: sbatch refuses the script, naming the same options
            assert "ambiguous" in said, (key, said)
            for candidate in re.findall(r"--[a-z-]+", str(error).split("any of", 1)[1].split("(")[0]):
                assert candidate in said, (key, candidate, said)
            continue
        assert "ambiguous" not in said and "unrecognized" not in said, (key, option, said)
    # and what it resolved to is what sbatch applies: a later --part= line replaces nbtrain's --partition= line
    assert "invalid partition specified: nosuch" in _test_only(slurm_cluster, tmp_path, "part", "nosuch").lower()


def _job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An exported Slurm job and a profile ``gpu-team`` that locks its partition to ``debug``."""
    profiles = tmp_path / "config" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "gpu-team.toml").write_text('version = "1"\nlocked = ["partition"]\n[options]\nbackend = "slurm"\n'
                                            'partition = "debug"\n')
    monkeypatch.setenv("NBTRAIN_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    spec = JobSpec(name="locked", device="cpu", nodes=1, procs_per_node=1, backend="slurm",  # type: ignore[arg-type]
                   partition="debug")
    files = build_job_files(capture_cell("print('hi')", {"__name__": "__main__"}), spec, origin="a test",
                            manifests=Manifests({}, {"job": "not needed here"}))
    return write_job_dir(files, tmp_path / "job")


def _queue_is_empty(cluster: Cluster, home: Path) -> None:
    queue = cluster.client("squeue", "-h", "-o", "%i %j")
    assert queue.returncode == 0 and queue.stdout.strip() == "", queue.stdout
    runs = home / "runs"
    assert not runs.is_dir() or not any(runs.iterdir())


def test_submit_refuses_every_abbreviation_and_no_spelling_changes_a_locked_partition(
        slurm_cluster: Cluster, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(tmp_path, monkeypatch)
    tries = [["--sbatch", f"{key}={value}"] for key, value in SEEN.items()]
    tries += [["--sbatch", f"{key}=down"] for key in ("partition", "parti", "p", "pa")]
    tries += [["--sbatch", "gpus=8"], ["--partition", "down"]]
    for flags in tries:
        assert main(["submit", str(job), "--profile", "gpu-team", *flags]) == 2, flags
        said = capsys.readouterr().err
        key = flags[1].split("=")[0]
        assert (f"--sbatch {key}=" in said or "locks partition to debug" in said) and "Traceback" not in said, said
    toml = job / "nbtrain.toml"
    toml.write_text(toml.read_text().replace("[slurm]\n", '[slurm]\nsbatch = {part = "down"}\n', 1))
    assert main(["submit", str(job)]) == 2
    assert "--sbatch part=down: sbatch reads part as --partition" in capsys.readouterr().err
    _queue_is_empty(slurm_cluster, home)
