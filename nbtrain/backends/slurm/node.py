"""What ``srun`` starts on each node of the allocation: ``python -m nbtrain.backends.slurm.node ATTEMPT_DIR ADDR PORT``.

It reads the attempt's ``plan.json`` from the shared store, takes its machine rank from ``SLURM_NODEID``, sets
the ranks' environment (the run marker, where events, logs and the result go, the device) and ``exec``s
``accelerate launch`` (:func:`nbtrain.backends.launch.accelerate_argv`), so the launcher is the task Slurm
tracks and signals.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from nbtrain.backends.launch import LaunchTarget, accelerate_argv, device_env
from nbtrain.backends.slurm.request import SlurmRequest
from nbtrain.gang.files import PLAN
from nbtrain.runtime import context as rt
from nbtrain.runtime import watchdog
from nbtrain.store import PRIVATE_UMASK, read_json


def main() -> None:
    """Process entry point (see the module docstring)."""
    if len(sys.argv) != 4:
        sys.stderr.write("usage: python -m nbtrain.backends.slurm.node ATTEMPT_DIR ADDRESS PORT\n")
        sys.exit(2)
    attempt_dir, address, port = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    os.umask(PRIVATE_UMASK)
    request = SlurmRequest.load(attempt_dir / PLAN)
    node = int(os.environ.get("SLURM_NODEID", "0"))
    env = dict(os.environ)
    env.update(request.env)
    if request.use_gpu:
        env["ACCELERATE_USE_CPU"] = "0"  # Slurm's gres plugin set CUDA_VISIBLE_DEVICES for this node's GPUs
    else:
        env.update(device_env(False))
    env[rt.ENV_NODE_RANK] = str(node)
    tmp = attempt_dir / "tmp" / f"node-{node}"
    tmp.mkdir(parents=True, exist_ok=True)
    env["TMPDIR"] = str(tmp)  # torchelastic leaves /tmp/torchelastic_* behind; keep them in the attempt
    try:
        supervisor = read_json(attempt_dir / "supervisor.json")
    except (OSError, ValueError):
        supervisor = {}
    if supervisor.get("host") == socket.gethostname() and supervisor.get("identity"):
        env[watchdog.ENV_SUPERVISOR] = supervisor["identity"]  # ranks end themselves if the supervisor dies
    argv = accelerate_argv(request.spec, python=request.python, use_gpu=request.use_gpu, node_rank=node,
                           main_address=address, main_port=port,
                           target=LaunchTarget("nbtrain.runtime.worker", (request.bundle_dir,)),
                           config_file=request.accelerate_config.path)
    os.chdir(request.cwd)
    os.execvpe(argv[0], argv, env)


if __name__ == "__main__":
    main()
