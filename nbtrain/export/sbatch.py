"""The job directory's ``job.sbatch``: the job as one Slurm batch job that needs no nbtrain (pure: text out).

``cd JOBDIR && sbatch job.sbatch`` runs ``train.py`` as the spec's gang with plain Accelerate::

    #SBATCH lines       the same options the slurm backend submits (nodes, one task per node, GPUs as
                        --gres=gpu:G or CPUs per task, partition/account/qos/time/constraint/reservation/
                        exclusive and the extra --sbatch options): nbtrain.backends.slurm.script.sbatch_options
    MAIN_ADDR           the first node's NodeAddr, asked from Slurm (node names need not resolve as hosts)
    MAIN_PORT           a free port of the batch host (the allocation's first node, where rank 0's node runs)
    srun ... --ntasks-per-node=1 --kill-on-bad-exit=1 sh -c 'exec accelerate launch --config_file accelerate.yaml
                        --machine_rank $SLURM_NODEID ...'

The accelerate command comes from :func:`nbtrain.backends.launch.accelerate_argv` (the one place that knows its
flags); only the per-node values are shell variables. It passes the job directory's generated Accelerate config
(:mod:`.accelconfig`, a path relative to the directory the job runs in), so no user-level config bends the job
and the FSDP/DeepSpeed options of the spec hold. A CPU spec (``--device cpu``) runs a gloo gang
(``ACCELERATE_USE_CPU=1``); ``gpu`` and ``auto`` ask Slurm for GPUs (export with ``--device cpu`` for a partition
without them). Python is ``$PYTHON`` (default ``python3``): an environment with torch and accelerate that every
node reaches at the same path.
"""

from __future__ import annotations

import shlex

from nbtrain.backends.launch import LaunchTarget, accelerate_argv, device_env
from nbtrain.backends.slurm.script import sbatch_options
from nbtrain.bundle.render import comment_text
from nbtrain.spec import Device, JobSpec

from .accelconfig import config_name

__all__ = ["SBATCH_NAME", "export_sbatch_script", "uses_gpu"]

SBATCH_NAME = "job.sbatch"

# placeholders accelerate_argv fills in like any value; each becomes a shell variable of the node's task
_RANK, _ADDR, _PORT, _PY = "NBTRAIN_RANK_", "NBTRAIN_ADDR_", 65535, "NBTRAIN_PY_"


def uses_gpu(spec: JobSpec) -> bool:
    """Whether the script asks Slurm for GPUs: every device but ``cpu`` (the script cannot probe a partition)."""
    return spec.device is not Device.CPU


def _node_command(spec: JobSpec, *, use_gpu: bool) -> str:
    """The shell text each node's task runs: ``exec $PYTHON -m accelerate.commands.launch ... train.py``."""
    argv = accelerate_argv(spec, python=_PY, use_gpu=use_gpu, node_rank=_RANK, main_address=_ADDR,
                           main_port=_PORT, target=LaunchTarget("train.py", module=False),
                           config_file=config_name(use_gpu))
    values = {_PY: '"$PYTHON"', _RANK: '"$SLURM_NODEID"', _ADDR: '"$MAIN_ADDR"', str(_PORT): '"$MAIN_PORT"'}
    return "exec " + " ".join(values.get(arg, shlex.quote(arg)) for arg in argv)


def export_sbatch_script(spec: JobSpec, *, job_name: str | None = None) -> str:
    """The text of ``job.sbatch`` for ``spec`` (see the module docstring). ``spec.env`` is exported as given:
    pass a spec whose secret-looking entries are already left out (:func:`nbtrain.export.jobdir.build_job_files`)."""
    use_gpu = uses_gpu(spec)
    options = sbatch_options(spec, use_gpu=use_gpu, job_name=job_name or spec.slug, output="slurm-%j.out",
                             chdir=".")
    gang = f"{spec.nodes} node(s) x {spec.procs} {'GPU' if use_gpu else 'CPU'} process(es)"
    env = dict(spec.env)
    if not use_gpu:
        env.update(device_env(False))
        env.setdefault("OMP_NUM_THREADS", "1")
    lines = [
        "#!/bin/sh",
        f"# {comment_text(spec.name)}: {gang} under Accelerate, without nbtrain.",
        "# Submit from this directory: sbatch job.sbatch   (PYTHON=/path/to/python sbatch job.sbatch for another",
        "# interpreter; it needs torch and accelerate and must be at the same path on every node).",
        *(f"#SBATCH {option}" for option in options),
        "",
        "set -eu",
        'PYTHON="${PYTHON:-python3}"',
        *(f"export {name}={shlex.quote(value)}" for name, value in sorted(env.items())),
        "# rank 0's node: the first of the allocation, at the address Slurm reaches it by",
        'MAIN_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        'MAIN_ADDR=$(sinfo -h -N -n "$MAIN_NODE" -o %o | head -n 1)',
        'MAIN_ADDR="${MAIN_ADDR:-$MAIN_NODE}"',
        "MAIN_PORT=$(\"$PYTHON\" -c 'import socket; s = socket.socket(); s.bind((\"\", 0)); "
        "print(s.getsockname()[1])')",
        "export PYTHON MAIN_ADDR MAIN_PORT",
        'echo "nbtrain job.sbatch: job $SLURM_JOB_ID on $SLURM_JOB_NODELIST, rendezvous $MAIN_ADDR:$MAIN_PORT"',
        "",
        f"srun --nodes={spec.nodes} --ntasks={spec.nodes} --ntasks-per-node=1 --kill-on-bad-exit=1 \\",
        f"    sh -c {shlex.quote(_node_command(spec, use_gpu=use_gpu))}",
        "",
    ]
    return "\n".join(lines)
