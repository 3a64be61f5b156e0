"""The exported ``job.sbatch`` (pure text): the spec's #SBATCH lines, one srun step, and an accelerate command
that Accelerate's own validator accepts once each node fills in its rank, address and port."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from nbtrain.export.accelconfig import export_accelerate_configs
from nbtrain.export.sbatch import SBATCH_NAME, export_sbatch_script
from nbtrain.spec import JobSpec

FULL = JobSpec(name="demo", nodes=2, procs_per_node=2, device="cpu", backend="slurm",  # type: ignore[arg-type]
               partition="debug", account="proj", qos="high", time_limit="1:00:00", constraint="ib",
               reservation="resv", exclusive=True, sbatch_options={"mem": "4G", "hint": "nomultithread"},
               env={"GREETING": "hello world"})


def _sbatch_lines(script: str) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH ")]


def _node_argv(script: str) -> list[str]:
    """The argv of node 1's accelerate launcher, with the shell variables filled in as its task would."""
    (line,) = [line for line in script.splitlines() if line.strip().startswith("sh -c ")]
    inner = shlex.split(line)[2]
    values = {"$PYTHON": sys.executable, "$SLURM_NODEID": "1", "$MAIN_ADDR": "10.0.0.1", "$MAIN_PORT": "29500"}
    return [values.get(arg, arg) for arg in shlex.split(inner)]


def test_every_slurm_option_of_the_spec_is_an_sbatch_line() -> None:
    lines = _sbatch_lines(export_sbatch_script(FULL))
    for want in ("--job-name=demo", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=2", "--partition=debug",
                 "--account=proj", "--qos=high", "--time=1:00:00", "--constraint=ib", "--reservation=resv",
                 "--exclusive", "--mem=4G", "--hint=nomultithread", "--output=slurm-%j.out"):
        assert want in lines, (want, lines)
    assert not any(line.startswith("--gres") for line in lines)  # a CPU gang asks for no GPU


def test_a_gpu_spec_asks_for_its_gpus_per_node_and_keeps_its_precision() -> None:
    script = export_sbatch_script(JobSpec(name="g", nodes=1, procs_per_node=8, mixed_precision="bf16"))  # type: ignore[arg-type]
    assert "--gres=gpu:8" in _sbatch_lines(script)
    assert "ACCELERATE_USE_CPU" not in script
    argv = _node_argv(script)
    assert argv[argv.index("--mixed_precision") + 1] == "bf16"


def test_one_srun_step_one_launcher_per_node_at_the_first_nodes_address() -> None:
    script = export_sbatch_script(FULL)
    assert "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --kill-on-bad-exit=1 \\" in script.splitlines()
    assert 'MAIN_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)' in script
    assert 'MAIN_ADDR=$(sinfo -h -N -n "$MAIN_NODE" -o %o | head -n 1)' in script
    assert "export ACCELERATE_USE_CPU=1" in script and "export GREETING='hello world'" in script
    argv = _node_argv(script)
    assert argv[:4] == ["exec", sys.executable, "-m", "accelerate.commands.launch"] and argv[-1] == "train.py"
    assert "--multi_gpu" in argv  # with ACCELERATE_USE_CPU=1: a gloo gang (DESIGN.md, Facts)
    assert argv[argv.index("--machine_rank") + 1] == "1" and argv[argv.index("--num_machines") + 1] == "2"
    assert argv[argv.index("--num_processes") + 1] == "4" and argv[argv.index("--main_process_ip") + 1] == "10.0.0.1"
    # the job runs without nbtrain: no nbtrain module or path after the interpreter (whose own path may say nbtrain)
    assert not [arg for arg in argv[2:] if "nbtrain" in arg]


CHECK = r"""
import json, sys
from accelerate.commands.launch import _validate_launch_command, launch_command_parser
args, _, _ = _validate_launch_command(launch_command_parser().parse_args(json.loads(sys.stdin.read())))
print(json.dumps({k: getattr(args, k) for k in ("multi_gpu", "cpu", "num_processes", "num_machines", "machine_rank")}))
"""


def test_accelerates_validator_accepts_the_node_command(tmp_path: Path) -> None:
    argv = _node_argv(export_sbatch_script(FULL))[4:]
    assert argv[argv.index("--config_file") + 1] == "accelerate-cpu.yaml"  # relative: the job dir is relocatable
    for name, text in export_accelerate_configs(FULL).items():  # the job directory, where the task runs
        (tmp_path / name).write_text(text)
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "ACCELERATE_USE_CPU": "1"}
    done = subprocess.run([sys.executable, "-c", CHECK], input=json.dumps(argv), capture_output=True, text=True,
                          env=env, timeout=120, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"multi_gpu": True, "cpu": False, "num_processes": 4, "num_machines": 2, "machine_rank": 1}


def test_the_job_directory_holds_the_script(tmp_path: Path) -> None:
    from nbtrain.bundle import capture_cell
    from nbtrain.export.jobdir import build_job_files
    from nbtrain.export.manifests import Manifests

    files = build_job_files(capture_cell("1\n", {"__name__": "__main__"}), FULL, origin="a test",
                            manifests=Manifests({}, {"job": "not needed"})).files
    assert files[SBATCH_NAME].decode() == export_sbatch_script(FULL)
    assert f"sbatch {SBATCH_NAME}" in files["README.md"].decode()
