"""Every generated launch passes Accelerate's own validator, and no user-level Accelerate config bends it.

``accelerate.commands.launch._validate_launch_command`` is what ``accelerate launch`` runs before starting
anything: it rejects flag pairs argparse accepts (``--multi_gpu`` with ``--use_fsdp``) and merges config
files into the arguments. Each case runs in a subprocess because Accelerate reads ``HF_HOME`` (where the
user's ``default_config.yaml`` lives) once, at import.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nbtrain.backends.accelerate_config import accelerate_config, render, strategy_refusal
from nbtrain.backends.launch import LaunchTarget, accelerate_argv
from nbtrain.spec import JobSpec

CHECK = r"""
import json, sys
from accelerate.commands.launch import _validate_launch_command, launch_command_parser
cases = json.loads(sys.stdin.read())
out = []
for argv in cases:
    args = launch_command_parser().parse_args(argv)
    try:
        args, _, _ = _validate_launch_command(args)
    except ValueError as error:
        out.append({"error": str(error)})
        continue
    keep = ("multi_gpu", "cpu", "use_fsdp", "use_deepspeed", "num_processes", "num_machines", "machine_rank",
            "mixed_precision", "dynamo_backend", "debug", "enable_cpu_affinity", "gpu_ids", "fsdp_version",
            "zero_stage", "deepspeed_multinode_launcher", "main_process_port")
    out.append({k: getattr(args, k, None) for k in keep})
print(json.dumps(out))
"""

HOSTILE = """compute_environment: LOCAL_MACHINE
distributed_type: MULTI_GPU
mixed_precision: fp16
num_processes: 7
num_machines: 1
gpu_ids: '3'
debug: true
enable_cpu_affinity: true
use_cpu: false
"""


def _combinations() -> list[tuple[JobSpec, bool]]:
    out = []
    for strategy, device_gpu, nodes, procs, mixed in itertools.product(
            ("ddp", "fsdp", "deepspeed"), (True, False), (1, 2), (1, 2, 8), ("no", "fp16", "bf16")):
        spec = JobSpec(nodes=nodes, procs_per_node=procs, strategy=strategy, mixed_precision=mixed,  # type: ignore[arg-type]
                       device="gpu" if device_gpu else "cpu")  # type: ignore[arg-type]
        if strategy_refusal(spec, device_gpu) is None:  # what plan() would let through
            out.append((spec, device_gpu))
    options: list[dict[str, object]] = [
        {"strategy": "fsdp", "fsdp_version": 1, "fsdp_sharding": "hybrid", "nodes": 2},
        {"strategy": "fsdp", "fsdp_version": 1, "fsdp_sharding": "no-shard", "fsdp_state_dict": "full"},
        {"strategy": "fsdp", "fsdp_sharding": "shard-grad-op", "fsdp_auto_wrap": "size", "fsdp_cpu_offload": True},
        {"strategy": "deepspeed", "zero_stage": 3, "zero_offload": "nvme", "gradient_accumulation": 8, "nodes": 2},
        {"strategy": "deepspeed", "zero_stage": 1, "zero_offload": "cpu"},
    ]
    for fields in options:
        out.append((JobSpec(procs_per_node=2, device="gpu", mixed_precision="bf16", **fields), True))  # type: ignore[arg-type]
    return out


def _argvs(tmp_path: Path, cases: list[tuple[JobSpec, bool]], *, with_config: bool) -> list[list[str]]:
    argvs = []
    for index, (spec, use_gpu) in enumerate(cases):
        config = tmp_path / f"accelerate-{index}.yaml"
        config.write_text(render(accelerate_config(spec, use_gpu=use_gpu, main_address="10.0.0.1", main_port=29500)[0]))
        argv = accelerate_argv(spec, python=sys.executable, use_gpu=use_gpu, node_rank=spec.nodes - 1,
                               main_address="10.0.0.1", main_port=29500, target=LaunchTarget("nbtrain.runtime.worker"),
                               config_file=str(config) if with_config else None)
        assert argv[1:3] == ["-m", "accelerate.commands.launch"]
        argvs.append(argv[3:])
    return argvs


def _validate(argvs: list[list[str]], hf_home: Path) -> list[dict[str, object]]:
    env = {**os.environ, "HF_HOME": str(hf_home), "ACCELERATE_USE_CPU": "1"}
    done = subprocess.run([sys.executable, "-c", CHECK], input=json.dumps(argvs), capture_output=True, text=True,
                          env=env, timeout=240, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def homes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    clean = tmp_path_factory.mktemp("hf-clean")
    hostile = tmp_path_factory.mktemp("hf-hostile")
    (hostile / "accelerate").mkdir()
    (hostile / "accelerate" / "default_config.yaml").write_text(HOSTILE)
    return clean, hostile


def test_every_allowed_combination_passes_accelerates_validator(tmp_path: Path, homes: tuple[Path, Path]) -> None:
    cases = _combinations()
    assert {spec.strategy.value for spec, _ in cases} == {"ddp", "fsdp", "deepspeed"}
    results = _validate(_argvs(tmp_path, cases, with_config=True), homes[0])
    for (spec, use_gpu), result in zip(cases, results, strict=True):
        assert "error" not in result, f"{spec.strategy.value} {spec.nodes}x{spec.procs} gpu={use_gpu}: {result}"
        flags = [k for k in ("multi_gpu", "cpu", "use_fsdp", "use_deepspeed") if result[k]]
        assert len(flags) <= 1, flags
        assert result["num_processes"] == spec.world_size and result["num_machines"] == spec.nodes
        if spec.strategy.value == "deepspeed" and spec.nodes > 1:
            assert result["deepspeed_multinode_launcher"] == "standard"


def test_a_users_own_default_config_changes_nothing(tmp_path: Path, homes: tuple[Path, Path]) -> None:
    cases = [(JobSpec(nodes=1, procs_per_node=2, device="gpu"), True),  # type: ignore[arg-type]
             (JobSpec(nodes=2, procs_per_node=2, device="cpu"), False)]  # type: ignore[arg-type]
    clean, hostile = homes
    assert _validate(_argvs(tmp_path, cases, with_config=True), hostile) == \
        _validate(_argvs(tmp_path, cases, with_config=True), clean)
    # without the generated config the user's file does bend the launch: the test can tell
    bent = _validate(_argvs(tmp_path, cases[:1], with_config=False), hostile)[0]
    assert bent.get("debug") is True or bent.get("enable_cpu_affinity") is True or "error" in bent


def test_fsdp_and_deepspeed_on_cpu_are_refused_with_the_reason() -> None:
    for strategy in ("fsdp", "deepspeed"):
        reason = strategy_refusal(JobSpec(procs_per_node=2, strategy=strategy), use_gpu=False)  # type: ignore[arg-type]
        assert reason is not None and f"--strategy {strategy} needs GPUs" in reason and "--strategy ddp" in reason
    assert strategy_refusal(JobSpec(procs_per_node=2), use_gpu=False) is None


def test_a_teams_file_is_merged_under_nbtrains_launch_settings_and_flags(tmp_path: Path) -> None:
    from nbtrain.backends.accelerate_config import read_team_config

    team_file = tmp_path / "team.yaml"
    team_file.write_text("num_processes: 64\nmain_process_port: 1\ndebug: true\nenable_cpu_affinity: true\n"
                         "fsdp_config:\n  fsdp_activation_checkpointing: true\n  fsdp_auto_wrap_policy: NO_WRAP\n"
                         "  fsdp_offload_params: false\n")
    spec = JobSpec(procs_per_node=4, strategy="fsdp", fsdp_cpu_offload=True)  # type: ignore[arg-type]
    config, source = accelerate_config(spec, use_gpu=True, main_address="10.0.0.1", main_port=29500,
                                       team=read_team_config(str(team_file)))
    assert config["num_processes"] == 4 and config["main_process_port"] == 29500  # the gang's shape is nbtrain's
    assert config["debug"] is True and source["debug"] == "your file"
    fsdp = config["fsdp_config"]
    assert fsdp["fsdp_activation_checkpointing"] is True  # a key only the team sets
    assert fsdp["fsdp_auto_wrap_policy"] == "NO_WRAP"  # the team's value beats nbtrain's default
    assert fsdp["fsdp_offload_params"] is True  # an explicit flag beats the team's file
    assert source["fsdp_config"] == "nbtrain + your file"


def test_a_broken_team_file_is_named() -> None:
    from nbtrain.backends.accelerate_config import read_team_config
    from nbtrain.errors import SpecError

    with pytest.raises(SpecError, match=r"--accelerate-config /nonexistent\.yaml: cannot read it"):
        read_team_config("/nonexistent.yaml")
