"""The job directory's Accelerate configs: the same generated config every backend passes, so an exported job
is as isolated as a run (no user-level ``default_config.yaml`` bends it) and keeps its strategy options.

``accelerate.yaml`` is the GPU launch's config (``--fsdp-*``, ``--zero-*`` and ``--gradient-accumulation`` live
only there); ``accelerate-cpu.yaml`` the CPU (gloo) launch's, written for DDP, the one strategy that runs on CPU,
and for a ``--device cpu`` spec. Every exported command passes one of them with ``--config_file NAME``: a path
relative to the job directory, where the commands run, so the directory stays relocatable. The rendezvous in
the files is a placeholder: each command's ``--main_process_ip/--main_process_port`` win over it.
"""

from __future__ import annotations

from nbtrain.backends.accelerate_config import accelerate_config, read_team_config, render
from nbtrain.spec import Device, JobSpec, Strategy

__all__ = ["CPU_CONFIG", "GPU_CONFIG", "config_name", "export_accelerate_configs"]

GPU_CONFIG = "accelerate.yaml"
CPU_CONFIG = "accelerate-cpu.yaml"


def config_name(use_gpu: bool) -> str:
    """The job directory's config file a launch on this device passes (relative to the job directory)."""
    return GPU_CONFIG if use_gpu else CPU_CONFIG


def export_accelerate_configs(spec: JobSpec) -> dict[str, str]:
    """File name -> YAML text of the configs the exported commands pass (see the module docstring).

    ``spec.accelerate_config`` (a team's file) is merged the way the backends merge it; SpecError when it cannot
    be read.
    """
    team = read_team_config(spec.accelerate_config) if spec.accelerate_config else None
    devices = [True]
    if spec.strategy is Strategy.DDP or spec.device is Device.CPU:
        devices.append(False)
    out = {}
    for use_gpu in devices:
        config, _ = accelerate_config(spec, use_gpu=use_gpu, main_address="127.0.0.1", main_port=29500, team=team)
        out[config_name(use_gpu)] = render(config)
    return out
