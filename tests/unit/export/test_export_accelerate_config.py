"""An exported job is as isolated as a run: its directory holds the generated Accelerate config with the spec's
FSDP/DeepSpeed options, and job.sbatch and every README command pass it (relative to the job directory), so
Accelerate's own validator, run there with a hostile ``default_config.yaml`` in HF_HOME, sees the spec's values."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nbtrain.bundle import capture_cell
from nbtrain.export.jobdir import build_job_files, write_job_dir
from nbtrain.export.manifests import Manifests
from nbtrain.export.sbatch import SBATCH_NAME
from nbtrain.spec import JobSpec

FSDP = JobSpec(name="f", nodes=1, procs_per_node=4, strategy="fsdp", fsdp_version=1,  # type: ignore[arg-type]
               fsdp_sharding="shard-grad-op", fsdp_auto_wrap="size", mixed_precision="bf16")
DEEPSPEED = JobSpec(name="d", nodes=2, procs_per_node=2, strategy="deepspeed", zero_stage=3,  # type: ignore[arg-type]
                    zero_offload="cpu", gradient_accumulation=8)

CHECK = r"""
import json, sys
from accelerate.commands.launch import _validate_launch_command, launch_command_parser
out = []
for argv in json.loads(sys.stdin.read()):
    args, defaults, _ = _validate_launch_command(launch_command_parser().parse_args(argv))
    out.append({"use_fsdp": args.use_fsdp, "use_deepspeed": args.use_deepspeed, "num_processes": args.num_processes,
                "debug": args.debug, "fsdp": getattr(defaults, "fsdp_config", None) or {},
                "deepspeed": getattr(defaults, "deepspeed_config", None) or {}})
print(json.dumps(out))
"""


def _export(spec: JobSpec, out: Path) -> Path:
    files = build_job_files(capture_cell("1\n", {"__name__": "__main__"}), spec, origin="a test",
                            manifests=Manifests({}, {"job": "not needed"}))
    return write_job_dir(files, out)


def _commands(job: Path) -> list[list[str]]:
    """The accelerate argv (after ``accelerate launch``) of job.sbatch's node task and of every README command."""
    values = {"$PYTHON": sys.executable, "$SLURM_NODEID": "0", "$MAIN_ADDR": "10.0.0.1", "$MAIN_PORT": "29500",
              "$i": "0", "$MAIN_HOST": "10.0.0.1"}
    (line,) = [x for x in (job / SBATCH_NAME).read_text().splitlines() if x.strip().startswith("sh -c ")]
    node = [values.get(a, a) for a in shlex.split(shlex.split(line)[2])]
    argvs = [node[node.index("accelerate.commands.launch") + 1:]]
    for text in (job / "README.md").read_text().splitlines():
        if "accelerate launch " in text:
            words = [values.get(a, a) for a in shlex.split(text.split("accelerate launch ", 1)[1])]
            argvs.append(words)
    return argvs


@pytest.fixture(scope="module")
def hostile_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("hf")
    (home / "accelerate").mkdir()
    (home / "accelerate" / "default_config.yaml").write_text(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_processes: 7\ndebug: true\n"
        "mixed_precision: fp16\nuse_cpu: false\n")
    return home


def _validate(job: Path, argvs: list[list[str]], home: Path) -> list[dict[str, object]]:
    env = {**os.environ, "HF_HOME": str(home), "ACCELERATE_USE_CPU": "1"}
    done = subprocess.run([sys.executable, "-c", CHECK], input=json.dumps(argvs), capture_output=True, text=True,
                          env=env, timeout=120, check=False, cwd=job)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_fsdp_options_reach_the_exported_config_and_every_command(tmp_path: Path, hostile_home: Path) -> None:
    job = _export(FSDP, tmp_path / "job")
    config = yaml.safe_load((job / "accelerate.yaml").read_text())
    assert config["distributed_type"] == "FSDP" and config["num_processes"] == 4
    assert config["fsdp_config"]["fsdp_sharding_strategy"] == "SHARD_GRAD_OP"
    assert config["fsdp_config"]["fsdp_auto_wrap_policy"] == "SIZE_BASED_WRAP"
    assert not (job / "accelerate-cpu.yaml").exists()  # FSDP does not run on CPU: no CPU command either
    argvs = _commands(job)
    assert len(argvs) == 2  # job.sbatch and the README's GPU command
    assert all(a[a.index("--config_file") + 1] == "accelerate.yaml" for a in argvs)
    for result in _validate(job, argvs, hostile_home):
        assert result["use_fsdp"] is True and result["num_processes"] == 4 and result["debug"] is False
        fsdp = result["fsdp"]
        assert isinstance(fsdp, dict) and fsdp["fsdp_sharding_strategy"] == "SHARD_GRAD_OP"


def test_deepspeed_options_reach_the_exported_config_and_every_command(tmp_path: Path, hostile_home: Path) -> None:
    job = _export(DEEPSPEED, tmp_path / "job")
    ds = yaml.safe_load((job / "accelerate.yaml").read_text())["deepspeed_config"]
    assert ds["zero_stage"] == 3 and ds["offload_optimizer_device"] == "cpu"
    assert ds["gradient_accumulation_steps"] == 8 and ds["deepspeed_multinode_launcher"] == "standard"
    argvs = _commands(job)
    assert len(argvs) == 2  # job.sbatch and the README's per-node command
    for result in _validate(job, argvs, hostile_home):
        assert result["use_deepspeed"] is True and result["num_processes"] == 4 and result["debug"] is False
        zero = result["deepspeed"]
        assert isinstance(zero, dict) and zero["zero_stage"] == 3 and zero["gradient_accumulation_steps"] == 8


def test_a_ddp_job_passes_the_cpu_config_to_its_cpu_command_and_stays_relocatable(tmp_path: Path) -> None:
    job = _export(JobSpec(name="c", procs_per_node=2), tmp_path / "job")  # type: ignore[arg-type]
    moved = job.rename(tmp_path / "elsewhere")
    readme = (moved / "README.md").read_text()
    assert "--config_file accelerate.yaml" in readme and "--config_file accelerate-cpu.yaml" in readme
    assert str(tmp_path) not in readme and str(tmp_path) not in (moved / SBATCH_NAME).read_text()
    assert yaml.safe_load((moved / "accelerate-cpu.yaml").read_text())["distributed_type"] == "MULTI_CPU"
