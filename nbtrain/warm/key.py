"""Which warm gang a run may use (pure): the gang key.

Two runs share a gang only when a cold launch of each would start the same processes: the same
``accelerate launch`` commands (shape, device, strategy, mixed precision, the generated Accelerate config) once
the per-run parts are set aside (rendezvous port, config path, bundle, the run's own ``NBTRAIN_*`` paths), the
same environment given to the ranks (``--env``), the same variables read when torch and Accelerate are imported
(``CUDA_VISIBLE_DEVICES``, ``NCCL_*``, ``OMP_*``… in the environment of the process that starts the gang), the
same interpreter and package versions. Anything else changes the key, and the run gets a gang of its own.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from nbtrain.gang.request import Launcher
from nbtrain.runtime.rankenv import PER_RUN_ENV

__all__ = ["IMPORT_TIME_ENV", "PER_RUN_ENV", "changed", "gang_key"]

#: Variables read when torch/Accelerate/NCCL are imported or initialised: a change needs new processes.
IMPORT_TIME_ENV = re.compile(r"^(CUDA_|NCCL_|OMP_|MKL_|KMP_|GLOO_|TORCH_|PYTORCH_|ACCELERATE_|HF_|LD_|NVIDIA_|"
                             r"ROCR_|HIP_|PYTHON(PATH|HASHSEED|OPTIMIZE|WARNINGS)$)")
_PER_RUN_FLAGS = {"--main_process_port", "--config_file"}
_PORT_LINE = re.compile(r"^main_process_port:.*$", re.MULTILINE)


def _command(argv: Sequence[str]) -> list[str]:
    """A launcher's argv without its per-run values (port, config path, the bundle: the last argument)."""
    out: list[str] = []
    skip = False
    for word in list(argv)[:-1]:
        if skip:
            out.append("*")
            skip = False
            continue
        out.append(word)
        skip = word in _PER_RUN_FLAGS
    return out


def gang_key(launchers: Sequence[Launcher], config_text: str, environ: Mapping[str, str],
             versions: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    """``(key, facts)``: the digest two runs must share to use one gang, and what it was computed from."""
    facts = {
        "nodes": len(launchers),
        "ranks": [list(launcher.ranks) for launcher in launchers],
        "commands": [_command(launcher.argv) for launcher in launchers],
        "cwd": sorted({launcher.cwd for launcher in launchers}),
        "rank_env": [{k: v for k, v in sorted(launcher.env.items()) if k not in PER_RUN_ENV}
                     for launcher in launchers],
        "accelerate_config": _PORT_LINE.sub("main_process_port: *", config_text),
        "import_env": {k: v for k, v in sorted(environ.items()) if IMPORT_TIME_ENV.match(k)},
        "versions": dict(sorted(versions.items())),
    }
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()
    return digest[:16], facts


#: What each fact of the key is, in the words of the cell's options (for notices).
_FACT_WORDS = {
    "nodes": "the shape (--nodes/--gpus)", "ranks": "the shape (--nodes/--gpus)",
    "commands": "the launch command (device, strategy, mixed precision)", "cwd": "the working directory",
    "rank_env": "--env", "accelerate_config": "the Accelerate config",
    "import_env": "variables read when torch is imported (CUDA_*, NCCL_*, OMP_*...)",
    "versions": "the interpreter or the installed packages",
}


def changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What differs between two gang keys' facts, in user words, each once (empty: nothing known differs)."""
    out: list[str] = []
    for fact, words in _FACT_WORDS.items():
        if old.get(fact) != new.get(fact) and words not in out:
            out.append(words)
    return out
