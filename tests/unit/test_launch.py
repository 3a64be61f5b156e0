"""The launch plan: accelerate_argv/device_env (checked against accelerate's own parser) and LocalBackend.plan."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from nbtrain.backends.launch import LaunchTarget, accelerate_argv, device_env
from nbtrain.backends.local.backend import LocalBackend
from nbtrain.backends.local.gpus import GpuInventory
from nbtrain.errors import EnvironmentProblem, SpecError
from nbtrain.spec import JobSpec
from nbtrain.store import Store

WORKER = LaunchTarget("nbtrain.runtime.worker", ("/store/bundles/abc",))


def _argv(spec: JobSpec, *, use_gpu: bool, node_rank: int = 0, target: LaunchTarget = WORKER) -> list[str]:
    return accelerate_argv(
        spec, python="/usr/bin/python3", use_gpu=use_gpu, node_rank=node_rank,
        main_address="127.0.0.1", main_port=29517, target=target,
    )


def _value(argv: Sequence[str], flag: str) -> str:
    assert argv.count(flag) == 1, f"{flag} should appear exactly once in {argv}"
    return argv[argv.index(flag) + 1]


@pytest.fixture(scope="module")
def accelerate_parser() -> Any:
    """The installed accelerate's real `accelerate launch` argument parser (imports torch: ~2 s)."""
    launch = pytest.importorskip("accelerate.commands.launch")
    return launch.launch_command_parser()


def _parse(parser: Any, argv: list[str]) -> argparse.Namespace:
    assert argv[1:3] == ["-m", "accelerate.commands.launch"]
    return parser.parse_args(argv[3:])  # type: ignore[no-any-return]


def test_argv_is_a_list_of_strings_starting_with_the_python() -> None:
    argv = _argv(JobSpec(nodes=2, procs_per_node=2), use_gpu=False)
    assert isinstance(argv, list)
    assert all(isinstance(part, str) for part in argv)
    assert argv[:3] == ["/usr/bin/python3", "-m", "accelerate.commands.launch"]


def test_single_cpu_process_uses_cpu_mode(accelerate_parser: Any) -> None:
    argv = _argv(JobSpec(), use_gpu=False)
    assert "--cpu" in argv
    assert "--multi_gpu" not in argv
    args = _parse(accelerate_parser, argv)
    assert args.cpu and not args.multi_gpu
    assert args.num_processes == 1
    assert args.module and args.training_script == "nbtrain.runtime.worker"
    assert args.training_script_args == ["/store/bundles/abc"]


@pytest.mark.parametrize("node_rank", [0, 1])
def test_two_by_two_cpu_gang(accelerate_parser: Any, node_rank: int) -> None:
    spec = JobSpec(nodes=2, procs_per_node=2, mixed_precision="bf16")  # type: ignore[arg-type]
    argv = _argv(spec, use_gpu=False, node_rank=node_rank)
    assert "--multi_gpu" in argv  # with ACCELERATE_USE_CPU=1 this is MULTI_CPU over gloo
    assert "--cpu" not in argv
    assert _value(argv, "--num_processes") == "4"
    assert _value(argv, "--num_machines") == "2"
    assert _value(argv, "--machine_rank") == str(node_rank)
    assert _value(argv, "--main_process_ip") == "127.0.0.1"
    assert _value(argv, "--main_process_port") == "29517"
    assert _value(argv, "--mixed_precision") == "no"  # bf16 is a GPU feature: dropped on CPU
    assert _value(argv, "--dynamo_backend") == "no"
    assert argv[-3:] == ["--module", "nbtrain.runtime.worker", "/store/bundles/abc"]
    args = _parse(accelerate_parser, argv)
    assert args.multi_gpu and not args.cpu
    assert (args.num_processes, args.num_machines, args.machine_rank) == (4, 2, node_rank)
    assert args.main_process_ip == "127.0.0.1"
    assert args.main_process_port == 29517
    assert args.mixed_precision == "no"
    assert args.dynamo_backend == "no"
    assert args.training_script_args == ["/store/bundles/abc"]


def test_gpu_fsdp_keeps_bf16(accelerate_parser: Any) -> None:
    spec = JobSpec(nodes=1, procs_per_node=4, strategy="fsdp", mixed_precision="bf16")  # type: ignore[arg-type]
    argv = _argv(spec, use_gpu=True)
    assert "--use_fsdp" in argv
    assert "--use_deepspeed" not in argv and "--multi_gpu" not in argv  # Accelerate rejects the pair
    assert _value(argv, "--mixed_precision") == "bf16"
    args = _parse(accelerate_parser, argv)
    assert args.use_fsdp and not args.multi_gpu
    assert args.mixed_precision == "bf16"
    assert args.num_processes == 4


def test_gpu_deepspeed(accelerate_parser: Any) -> None:
    spec = JobSpec(nodes=2, procs_per_node=8, strategy="deepspeed", mixed_precision="fp16")  # type: ignore[arg-type]
    argv = _argv(spec, use_gpu=True, node_rank=1)
    assert "--use_deepspeed" in argv
    assert "--use_fsdp" not in argv
    assert _value(argv, "--deepspeed_multinode_launcher") == "standard"  # never Accelerate's default pdsh
    args = _parse(accelerate_parser, argv)
    assert args.use_deepspeed and not args.multi_gpu
    assert args.mixed_precision == "fp16"
    assert (args.num_processes, args.num_machines, args.machine_rank) == (16, 2, 1)


def test_ddp_adds_no_strategy_flag() -> None:
    argv = _argv(JobSpec(procs_per_node=2), use_gpu=True)
    assert "--use_fsdp" not in argv
    assert "--use_deepspeed" not in argv


def test_single_gpu_is_neither_cpu_nor_multi_gpu(accelerate_parser: Any) -> None:
    argv = _argv(JobSpec(mixed_precision="fp16"), use_gpu=True)  # type: ignore[arg-type]
    assert "--cpu" not in argv
    assert "--multi_gpu" not in argv
    args = _parse(accelerate_parser, argv)
    assert args.mixed_precision == "fp16"


def test_a_script_target_is_passed_as_a_path(accelerate_parser: Any) -> None:
    target = LaunchTarget("/work/train.py", ("--epochs", "3"), module=False)
    argv = _argv(JobSpec(), use_gpu=False, target=target)
    assert "--module" not in argv
    assert argv[-3:] == ["/work/train.py", "--epochs", "3"]
    args = _parse(accelerate_parser, argv)
    assert not args.module
    assert args.training_script == "/work/train.py"
    assert args.training_script_args == ["--epochs", "3"]


def test_device_env_for_cpu() -> None:
    env = device_env(False)
    assert env["ACCELERATE_USE_CPU"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == ""  # hides any GPU from a CPU gang


def test_device_env_for_gpu_pins_the_given_ids() -> None:
    env = device_env(True, ("2", "3"))
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert env.get("ACCELERATE_USE_CPU", "0") != "1"


# -- LocalBackend.plan: the launch plan of a local gang, GPU mapping included (fake inventory) ------

NO_GPU = GpuInventory()
FOUR_H100 = GpuInventory(("0", "1", "2", "3"), ("NVIDIA H100 80GB HBM3",) * 4)


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NBTRAIN_PORT_RANGE", raising=False)
    monkeypatch.delenv("NBTRAIN_PYTHON", raising=False)


def _backend(tmp_path: Path, gpus: GpuInventory, python: str | None = sys.executable) -> LocalBackend:
    return LocalBackend(Store(tmp_path / "store"), python=python, gpus=gpus)


def _plan(backend: LocalBackend, spec: JobSpec) -> Any:
    return backend.plan(spec, "/store/bundles/abc", "abc123" * 8, "digits-3fa9c2")


def _files(root: Path) -> list[Path]:
    return sorted(root.rglob("*"))


def test_plan_splits_gpus_between_nodes(tmp_path: Path) -> None:
    plan = _plan(_backend(tmp_path, FOUR_H100), JobSpec(nodes=2, procs_per_node=2))
    node0, node1 = plan.request.launchers
    assert node0.env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert node1.env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert (node0.ranks, node1.ranks) == ((0, 1), (2, 3))
    assert plan.notices == ()
    assert "CPU" not in plan.render()
    assert plan.request.use_gpu is True
    for node, launcher in enumerate(plan.request.launchers):
        assert _value(launcher.argv, "--machine_rank") == str(node)
        assert _value(launcher.argv, "--num_processes") == "4"
        assert "--multi_gpu" in launcher.argv
        assert launcher.env["NBTRAIN_RUN_ID"] == "digits-3fa9c2"  # the marker that finds the gang later
    ports = {_value(x.argv, "--main_process_port") for x in plan.request.launchers}
    assert ports == {str(plan.request.port)}  # every node meets at the same rendezvous


def test_plan_uses_the_visible_gpu_ids_not_positions(tmp_path: Path) -> None:
    inventory = GpuInventory(("2", "3", "6", "7"), ("A100",) * 4)
    plan = _plan(_backend(tmp_path, inventory), JobSpec(nodes=2, procs_per_node=2))
    assert [x.env["CUDA_VISIBLE_DEVICES"] for x in plan.request.launchers] == ["2,3", "6,7"]


def test_plan_refuses_more_gpus_than_the_machine_has(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentProblem) as info:
        _plan(_backend(tmp_path, FOUR_H100), JobSpec(nodes=2, procs_per_node=4))
    message = str(info.value)
    assert "needs 8 GPUs" in message
    assert "has 4" in message
    assert "H100" in message


def test_plan_refuses_device_gpu_without_gpus(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentProblem, match="--device gpu") as info:
        _plan(_backend(tmp_path, NO_GPU), JobSpec(device="gpu"))  # type: ignore[arg-type]
    assert "--device cpu" in str(info.value)


def test_plan_falls_back_to_cpu_with_one_notice(tmp_path: Path) -> None:
    plan = _plan(_backend(tmp_path, NO_GPU), JobSpec(nodes=2, procs_per_node=2))
    assert len(plan.notices) == 1
    assert "CPU" in plan.notices[0]
    assert "2 node(s) x 2" in plan.notices[0]
    assert plan.render().count(plan.notices[0]) == 1
    assert plan.request.use_gpu is False
    for launcher in plan.request.launchers:
        assert launcher.env["ACCELERATE_USE_CPU"] == "1"
        assert launcher.env["CUDA_VISIBLE_DEVICES"] == ""
        assert launcher.gpus == ()


def test_device_cpu_ignores_present_gpus(tmp_path: Path) -> None:
    plan = _plan(_backend(tmp_path, FOUR_H100), JobSpec(device="cpu", procs_per_node=2))  # type: ignore[arg-type]
    assert plan.request.use_gpu is False
    assert plan.request.launchers[0].env["CUDA_VISIBLE_DEVICES"] == ""
    assert "--device cpu" in plan.notices[0]


def test_user_env_reaches_every_rank(tmp_path: Path) -> None:
    plan = _plan(_backend(tmp_path, NO_GPU), JobSpec(nodes=2, env={"WANDB_MODE": "offline"}))
    assert all(x.env["WANDB_MODE"] == "offline" for x in plan.request.launchers)


def test_plan_writes_nothing(tmp_path: Path) -> None:
    before = _files(tmp_path)
    _plan(_backend(tmp_path, FOUR_H100), JobSpec(nodes=2, procs_per_node=2))
    _plan(_backend(tmp_path, NO_GPU), JobSpec(nodes=2, procs_per_node=2))
    assert _files(tmp_path) == before
    assert not (tmp_path / "store").exists()


def _bare_venv(root: Path, *, copies: bool) -> str:
    """A real interpreter without accelerate (no pip, no system site-packages)."""
    argv = [sys.executable, "-m", "venv", "--without-pip", str(root)] + (["--copies"] if copies else [])
    subprocess.run(argv, check=True, timeout=60)
    return str(root / "bin" / "python")


def test_plan_without_accelerate_says_how_to_install_it(tmp_path: Path) -> None:
    python = _bare_venv(tmp_path / "bare-venv", copies=True)
    with pytest.raises(EnvironmentProblem) as info:
        _plan(_backend(tmp_path, NO_GPU, python=python), JobSpec())
    message = str(info.value)
    assert "accelerate is not installed" in message
    assert python in message
    assert "pip install accelerate" in message


def test_plan_without_accelerate_in_a_symlinked_venv(tmp_path: Path) -> None:
    python = _bare_venv(tmp_path / "bare-venv", copies=False)
    with pytest.raises(EnvironmentProblem, match="accelerate is not installed"):
        _plan(_backend(tmp_path, NO_GPU, python=python), JobSpec())


def test_every_gpu_node_gets_a_gpu_or_the_plan_is_refused(tmp_path: Path) -> None:
    one_gpu = GpuInventory(("0",), ("L4",))
    spec = JobSpec(device="gpu", nodes=2, procs_per_node=0)  # type: ignore[arg-type]
    try:
        plan = _plan(_backend(tmp_path, one_gpu), spec)
    except EnvironmentProblem:
        return
    for launcher in plan.request.launchers:
        assert launcher.env["CUDA_VISIBLE_DEVICES"] != ""


def test_plan_refuses_fsdp_on_a_machine_without_gpus_and_writes_nothing(tmp_path: Path) -> None:
    backend = _backend(tmp_path, NO_GPU)
    with pytest.raises(SpecError) as info:
        _plan(backend, JobSpec(procs_per_node=2, strategy="fsdp"))  # type: ignore[arg-type]
    assert "--strategy fsdp needs GPUs" in str(info.value)
    assert _files(tmp_path) == []


def test_plan_passes_its_own_accelerate_config_and_shows_it(tmp_path: Path) -> None:
    plan = _plan(_backend(tmp_path, FOUR_H100), JobSpec(nodes=2, procs_per_node=2, strategy="fsdp"))  # type: ignore[arg-type]
    config = plan.request.accelerate_config
    for launcher in plan.request.launchers:
        assert _value(launcher.argv, "--config_file") == config.path
    assert "distributed_type: FSDP" in config.text and "fsdp_version: 2" in config.text
    assert "accelerate config (" in plan.render() and "distributed_type: FSDP" in plan.render()
    assert _files(tmp_path) == []  # planning writes nothing; submit writes the file next to plan.json
