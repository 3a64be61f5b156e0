"""The launch facts every backend's plan shares, computed once (pure but for reading the team's config file).

A plan places them; it does not compute them again: the strategy this device refuses (:func:`refuse_strategy`),
the generated Accelerate config with what came from the team's own file, and the notices the user sees once
(:func:`launch_facts`), and whether the ranks' interpreter has Accelerate (:func:`require_accelerate`).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from dataclasses import dataclass

from nbtrain.backends.accelerate_config import (
    accelerate_config,
    from_team_file,
    read_team_config,
    render,
    strategy_refusal,
    team_notice,
)
from nbtrain.errors import EnvironmentProblem, SpecError
from nbtrain.spec import JobSpec

__all__ = ["LaunchFacts", "accelerate_available", "accelerate_missing", "launch_facts", "refuse_strategy",
           "require_accelerate"]


@dataclass(frozen=True)
class LaunchFacts:
    """``config_text``: the generated Accelerate config (YAML); ``team_lines``: the dry run's lines naming what came
    from ``--accelerate-config`` (empty without one); ``notices``: what the user is told once, in order."""

    use_gpu: bool
    config_text: str
    team_lines: tuple[str, ...]
    notices: tuple[str, ...]


def refuse_strategy(spec: JobSpec, use_gpu: bool) -> None:
    """Raise SpecError when ``spec``'s strategy cannot run on the chosen device (the message names the fix)."""
    refusal = strategy_refusal(spec, use_gpu)
    if refusal is not None:
        raise SpecError(refusal)


def launch_facts(spec: JobSpec, *, use_gpu: bool, main_port: int, no_gpu_notice: str | None = None) -> LaunchFacts:
    """The config and notices of a launch on ``use_gpu`` (``no_gpu_notice``: the backend's words for a CPU gang).

    The main address and port in the config are placeholders a launcher's flags win over (``main_port`` is the
    local backend's real one). Raises SpecError for a team config file that cannot be read.
    """
    notices = [no_gpu_notice] if no_gpu_notice and not use_gpu else []
    team = read_team_config(spec.accelerate_config) if spec.accelerate_config else None
    config, source = accelerate_config(spec, use_gpu=use_gpu, main_address="127.0.0.1", main_port=main_port,
                                       team=team)
    lines: tuple[str, ...] = ()
    if team is not None:
        notices.append(team_notice(str(spec.accelerate_config), source))
        lines = (f"  from your file {spec.accelerate_config}: {', '.join(from_team_file(source)) or 'nothing'}",)
    return LaunchFacts(use_gpu, render(config), lines, tuple(notices))


def accelerate_available(python: str) -> bool:
    """Whether ``python`` can import Accelerate (this interpreter: looked up in place; another: asked)."""
    if python == sys.executable:  # not realpath: a venv's python is a symlink with other packages
        return importlib.util.find_spec("accelerate") is not None
    probe = "import importlib.util,sys; sys.exit(importlib.util.find_spec('accelerate') is None)"
    return subprocess.run([python, "-c", probe], capture_output=True, timeout=30).returncode == 0


def accelerate_missing(python: str, *, where: str = "") -> EnvironmentProblem:
    """The error for ranks' interpreter ``python`` without Accelerate, naming the install command.

    ``where``: where to install it (e.g. "on the shared filesystem"); default: or choose another interpreter.
    """
    fix = f" ({where})" if where else " (or set NBTRAIN_PYTHON to an interpreter that has it)"
    return EnvironmentProblem(f"accelerate is not installed for {python}; install it with "
                              f"`{python} -m pip install accelerate`{fix}.")


def require_accelerate(python: str, *, where: str = "", probe_others: bool = True) -> None:
    """Raise :func:`accelerate_missing` when ``python`` lacks Accelerate (``probe_others`` False: only this
    interpreter is checked; another one is not reachable from here)."""
    if python != sys.executable and not probe_others:
        return
    if not accelerate_available(python):
        raise accelerate_missing(python, where=where)
