"""The optional Python packages a strategy needs where its ranks run, and the probe that looks for them.

DeepSpeed is an optional extra (``pip install 'nbtrain[deepspeed]'``). A ``--strategy deepspeed`` run without it
would start every rank only for each to fail importing it, so it is refused before anything starts, where the
check can see the ranks' interpreter:

- local and Slurm (an environment every node shares at the same path): :meth:`nbtrain.backends.base.Backend.plan`
  calls :func:`require_strategy_packages` with the backend's :meth:`~nbtrain.backends.base.Backend.ranks_python`;
- Kubernetes (the ranks run in an image): the pod's preflight (:mod:`nbtrain.backends.kubernetes.preflight`) is
  given :func:`strategy_packages` and names the image that lacks them.

:func:`importable` is the one probe (tests replace it here).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from nbtrain.errors import EnvironmentProblem
from nbtrain.spec import JobSpec, Strategy

__all__ = ["STRATEGY_PACKAGES", "importable", "require_strategy_packages", "strategy_packages"]

#: strategy -> (importable module, the nbtrain extra that installs it)
STRATEGY_PACKAGES: dict[Strategy, tuple[tuple[str, str], ...]] = {
    Strategy.DEEPSPEED: (("deepspeed", "deepspeed"),),
}


def strategy_packages(spec: JobSpec) -> list[str]:
    """The modules the ranks' interpreter must import for ``spec``'s strategy (none for DDP and FSDP)."""
    return [module for module, _ in STRATEGY_PACKAGES.get(spec.strategy, ())]


def importable(python: str, module: str) -> bool:
    """Whether ``python`` finds ``module`` (located with ``find_spec``, not imported). The probe tests replace."""
    if python == sys.executable:  # not realpath: a venv's python is a symlink with other packages
        return importlib.util.find_spec(module) is not None
    probe = f"import importlib.util,sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    try:
        return subprocess.run([python, "-c", probe], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def require_strategy_packages(spec: JobSpec, python: str) -> None:
    """Raise EnvironmentProblem naming the strategy, the interpreter and the extra when ``python`` lacks a module
    ``spec``'s strategy needs; return None otherwise (always for DDP and FSDP)."""
    for module, extra in STRATEGY_PACKAGES.get(spec.strategy, ()):
        if not importable(python, module):
            raise EnvironmentProblem(
                f"--strategy {spec.strategy.value}: {module} is not installed for {python}, the interpreter the "
                f"ranks run; install the extra with `{python} -m pip install 'nbtrain[{extra}]'` (or `pip install "
                f"{module}`) in that environment, or choose --strategy ddp/fsdp.")
