"""The attempt's batch script and ``srun`` command (pure: a request in, text and argv lists out).

One ``sbatch`` job per attempt: ``#SBATCH`` lines for the gang's shape (``--nodes N --ntasks-per-node=1``, GPUs
as ``--gres=gpu:G`` or ``--cpus-per-task`` for a CPU gang) and the user's Slurm options, then ``exec`` of the
nbtrain supervisor, which runs the gang as ONE step::

    srun --nodes N --ntasks N --ntasks-per-node=1 --kill-on-bad-exit=1 --output LOGS/node-%n.log \\
         PYTHON -m nbtrain.backends.slurm.node ATTEMPT_DIR ADDRESS PORT

and each node's task execs ``accelerate launch --machine_rank $SLURM_NODEID`` (:mod:`.node`). Every value on an
``#SBATCH`` line was checked by :class:`nbtrain.spec.JobSpec` (one token, no shell syntax).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from nbtrain.spec import JobSpec, sbatch_lines

if TYPE_CHECKING:
    from nbtrain.backends.slurm.request import SlurmRequest

__all__ = ["batch_script", "probe_argv", "sbatch_options", "srun_argv"]


def sbatch_options(spec: JobSpec, *, use_gpu: bool, job_name: str, output: str, chdir: str) -> list[str]:
    """The job's sbatch options (``--name=value``), in the order the script shows them."""
    options = [f"--job-name={job_name}", f"--nodes={spec.nodes}", "--ntasks-per-node=1"]
    if use_gpu:
        options.append(f"--gres=gpu:{spec.procs}")
    else:
        options.append(f"--cpus-per-task={spec.procs}")
    options += [f"--output={output}", f"--chdir={chdir}", "--export=ALL", "--no-requeue"]
    for name, value in (("partition", spec.partition), ("account", spec.account), ("qos", spec.qos),
                        ("time", spec.time_limit), ("constraint", spec.constraint),
                        ("reservation", spec.reservation)):
        if value:
            options.append(f"--{name}={value}")
    if spec.exclusive:
        options.append("--exclusive")
    # resolved again (getopt_long's prefixes: sbatchopts) so that no line after nbtrain's can replace one of them
    options += [f"--{k}={v}" if v else f"--{k}" for k, v in sbatch_lines(spec.sbatch_options).items()]
    return options


def batch_script(options: list[str], *, python: str, attempt_dir: str, run_id: str) -> str:
    """The batch script: ``#SBATCH`` lines, then the supervisor (the one program the job runs)."""
    lines = ["#!/bin/sh", f"# nbtrain run {run_id}: the supervisor starts the gang as one srun step"]
    lines += [f"#SBATCH {option}" for option in options]
    lines += ["", f"exec {shlex.quote(python)} -m nbtrain.backends.slurm.supervisor {shlex.quote(attempt_dir)}", ""]
    return "\n".join(lines)


def srun_argv(request: SlurmRequest, *, address: str, port: int) -> list[str]:
    """The step that starts one launcher per node (``--kill-on-bad-exit``: one failed node ends the step)."""
    nodes = request.nodes
    return [
        "srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
        f"--output={request.logs_dir}/node-%n.log", "--export=ALL", f"--job-name=nbtrain-{request.run_id}",
        request.python, "-m", "nbtrain.backends.slurm.node", request.attempt_dir, address, str(port),
    ]


def probe_argv(nodes: int) -> list[str]:
    """A step that starts ``true`` once on each node of the allocation: can every node still run a task?

    Run before a restart in place, after a failure srun cannot tell from a lost node (a task ``Killed``): a node
    whose slurmd is gone refuses the launch at once, long before slurmctld declares it DOWN (``SlurmdTimeout``).
    """
    return ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
            "--export=ALL", "--job-name=nbtrain-probe", "true"]
