"""The Accelerate config file every launch passes explicitly (pure).

``accelerate launch`` merges ``~/.cache/huggingface/accelerate/default_config.yaml`` (or ``$HF_HOME``'s) into
every non-CPU launch for each field the command line does not set, so the same cell would behave
differently per user. nbtrain therefore writes a complete config for each attempt (kept in the attempt's
directory, shown by ``--dry-run``) and passes it with ``--config_file``: no user-level file changes a run.

The strategy decides Accelerate's distributed type: DDP is ``MULTI_GPU`` (``MULTI_CPU`` on CPU, through
``--multi_gpu`` + ``ACCELERATE_USE_CPU=1``), FSDP is ``FSDP`` (``--fsdp-*`` options), DeepSpeed is
``DEEPSPEED`` (``--zero-*`` options, the ``standard`` multi-node launcher, never Accelerate's default
``pdsh``). A team's own file (``--accelerate-config``) is merged under these, visibly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from nbtrain.spec import JobSpec, MixedPrecision, Strategy

__all__ = ["CONFIG_NAME", "LAUNCH_KEYS", "TEAM_RULE", "accelerate_config", "deepspeed_config", "distributed_type",
           "from_team_file", "fsdp_config", "read_team_config", "render", "strategy_refusal", "team_notice"]

CONFIG_NAME = "accelerate.yaml"  # in each attempt's directory

_SHARDING_V1 = {"full": "FULL_SHARD", "shard-grad-op": "SHARD_GRAD_OP", "hybrid": "HYBRID_SHARD",
                "no-shard": "NO_SHARD"}
_WRAP = {"transformer": "TRANSFORMER_BASED_WRAP", "size": "SIZE_BASED_WRAP", "none": "NO_WRAP"}
_STATE_DICT = {"sharded": "SHARDED_STATE_DICT", "full": "FULL_STATE_DICT"}
SIZE_WRAP_MIN_PARAMS = 100_000_000
#: Keys nbtrain always decides (the gang's shape and rendezvous): a team's file never changes them.
LAUNCH_KEYS = frozenset({"compute_environment", "distributed_type", "use_cpu", "num_processes", "num_machines",
                         "machine_rank", "gpu_ids", "main_process_ip", "main_process_port", "rdzv_backend",
                         "same_network", "mixed_precision"})


def fsdp_config(spec: JobSpec) -> dict[str, Any]:
    """Accelerate's ``fsdp_config`` for ``spec``'s FSDP options."""
    config: dict[str, Any] = {
        "fsdp_version": spec.fsdp_version,
        "fsdp_auto_wrap_policy": _WRAP[spec.fsdp_auto_wrap.value],
        "fsdp_state_dict_type": _STATE_DICT[spec.fsdp_state_dict.value],
        "fsdp_offload_params": spec.fsdp_cpu_offload,
        "fsdp_cpu_ram_efficient_loading": False,
    }
    if spec.fsdp_version == 2:
        config["fsdp_reshard_after_forward"] = spec.fsdp_sharding.value == "full"
    else:
        config["fsdp_sharding_strategy"] = _SHARDING_V1[spec.fsdp_sharding.value]
    if spec.fsdp_auto_wrap.value == "size":
        config["fsdp_min_num_params"] = SIZE_WRAP_MIN_PARAMS
    return config


def deepspeed_config(spec: JobSpec) -> dict[str, Any]:
    """Accelerate's ``deepspeed_config`` for ``spec``'s ZeRO options (always the ``standard`` multi-node launcher)."""
    return {
        "zero_stage": spec.zero_stage,
        "offload_optimizer_device": spec.zero_offload.value,
        "offload_param_device": spec.zero_offload.value if spec.zero_stage == 3 else "none",
        "gradient_accumulation_steps": spec.gradient_accumulation,
        "zero3_init_flag": spec.zero_stage == 3,
        "deepspeed_multinode_launcher": "standard",
    }


def strategy_refusal(spec: JobSpec, use_gpu: bool) -> str | None:
    """Why ``spec``'s strategy cannot run on this device (None when it can).

    Measured with Accelerate 1.15 on CPU: ``--use_fsdp`` (v1) fails on every rank ("no available devices
    found") and ``--use_fsdp --fsdp_version 2`` silently trains plain DDP (MULTI_CPU). A run labelled FSDP
    must never be DDP in disguise, so both are refused without a GPU; DeepSpeed needs CUDA too.
    """
    if spec.strategy is Strategy.DDP or use_gpu:
        return None
    return (f"--strategy {spec.strategy.value} needs GPUs: on CPU Accelerate either fails on every rank or silently "
            f"trains plain DDP under the {spec.strategy.value} label; use --strategy ddp for a CPU gang, or run on "
            "GPUs (--device gpu on a GPU machine, or --backend kubernetes).")


def distributed_type(spec: JobSpec, use_gpu: bool) -> str:
    """Accelerate's distributed type for ``spec`` on this device."""
    if spec.strategy is Strategy.FSDP:
        return "FSDP"
    if spec.strategy is Strategy.DEEPSPEED:
        return "DEEPSPEED"
    if spec.world_size == 1:
        return "NO"
    return "MULTI_GPU" if use_gpu else "MULTI_CPU"


def accelerate_config(spec: JobSpec, *, use_gpu: bool, main_address: str, main_port: int,
                       team: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """The complete config of one attempt, and where each key came from ("nbtrain", "your file", or for
    ``fsdp_config``/``deepspeed_config`` "nbtrain + your file"; a nested key the file decided is listed as
    ``"deepspeed_config.zero_stage": "your file"``).

    ``team`` is the parsed ``--accelerate-config`` file: its keys come through except the gang's shape and
    rendezvous (:data:`LAUNCH_KEYS`). Inside ``fsdp_config``/``deepspeed_config`` the rule is :data:`TEAM_RULE`:
    the spec holds values, not where they came from, so a strategy option counts as given when its value
    differs from nbtrain's default; one equal to the default (``--zero-stage 2``) leaves the file's value.
    The machine rank is given per node on the command line.
    """
    mixed = spec.mixed_precision if use_gpu else MixedPrecision.NO
    config: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": distributed_type(spec, use_gpu),
        "mixed_precision": mixed.value,
        "use_cpu": not use_gpu,
        "debug": False,
        "num_processes": spec.world_size,
        "num_machines": spec.nodes,
        "machine_rank": 0,
        "gpu_ids": "all",
        "main_process_ip": main_address,
        "main_process_port": main_port,
        "rdzv_backend": "static",
        "same_network": spec.nodes > 1,
        "main_training_function": "main",
        "enable_cpu_affinity": False,
        "downcast_bf16": "no",
        "dynamo_config": {},
        "tpu_env": [],
        "tpu_use_cluster": False,
        "tpu_use_sudo": False,
    }
    nested = None
    if spec.strategy is Strategy.FSDP:
        nested = ("fsdp_config", fsdp_config(spec), fsdp_config(JobSpec(strategy=Strategy.FSDP)))
    elif spec.strategy is Strategy.DEEPSPEED:
        nested = ("deepspeed_config", deepspeed_config(spec), deepspeed_config(JobSpec(strategy=Strategy.DEEPSPEED)))
    source = dict.fromkeys(config, "nbtrain")
    for key, value in (team or {}).items():
        if key in LAUNCH_KEYS or key in ("fsdp_config", "deepspeed_config"):
            continue
        config[key], source[key] = value, "your file"
    if nested is not None:
        name, mine, defaults = nested
        theirs = dict((team or {}).get(name) or {})
        explicit = {k: v for k, v in mine.items() if defaults.get(k) != v}
        config[name] = {**mine, **theirs, **explicit}
        source[name] = "nbtrain + your file" if theirs else "nbtrain"
        source.update((f"{name}.{key}", "your file") for key in sorted(theirs) if key not in explicit)
    return config, source


#: How a team's file and the strategy options meet, as the notice and the docs say it.
TEAM_RULE = ("a strategy option (--fsdp-*, --zero-*, --gradient-accumulation) wins over your file only with a value "
             "other than nbtrain's default: one left at or set to its default (e.g. --zero-stage 2) leaves your "
             "file's value")


def from_team_file(source: Mapping[str, str]) -> list[str]:
    """The keys of :func:`accelerate_config`'s ``source`` whose value is the team file's (nested ones dotted)."""
    return sorted(k for k, v in source.items() if v == "your file")


def team_notice(path: str, source: Mapping[str, str]) -> str:
    """The notice of a run merged with ``--accelerate-config PATH``: what came from the file, and the rules."""
    taken = from_team_file(source)
    return (f"--accelerate-config {path}: used {', '.join(taken) or 'nothing'} from your file; nbtrain keeps the "
            f"gang's shape and rendezvous ({', '.join(sorted(LAUNCH_KEYS))}); {TEAM_RULE}")


def render(config: dict[str, Any]) -> str:
    """The YAML text of ``config`` (what goes into the attempt's ``accelerate.yaml``)."""
    return "# Generated by nbtrain for this attempt: no user-level Accelerate config is read.\n" + yaml.safe_dump(
        config, sort_keys=True)


def read_team_config(path: str) -> dict[str, Any]:
    """The YAML mapping of ``--accelerate-config PATH``; SpecError naming the file and the problem."""
    from pathlib import Path

    from nbtrain.errors import SpecError

    file = Path(path).expanduser()
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except OSError as error:
        raise SpecError(f"--accelerate-config {path}: cannot read it ({error.strerror}); give the path of your "
                        "team's Accelerate config YAML.") from None
    except yaml.YAMLError as error:
        raise SpecError(f"--accelerate-config {path}: not valid YAML ({error}).") from None
    if not isinstance(data, dict):
        raise SpecError(f"--accelerate-config {path}: expected a mapping of Accelerate config keys, got "
                        f"{type(data).__name__}.")
    return data
