"""The Slurm backend: one ``sbatch`` job per attempt; the nbtrain supervisor runs inside the allocation.

Modules: :mod:`.script` (pure: the batch script and the per-node command), :mod:`.jobstate` (pure: Slurm's job
records and states to nbtrain's), :mod:`.cli` (the only module that runs Slurm's commands), :mod:`.supervisor`
(the batch script's program), :mod:`.node` (what ``srun`` starts on each node), :mod:`.checks` (``nbtrain
doctor``'s Slurm checks), :mod:`.backend`.

:class:`SlurmBackend` is imported on first use: ``python -m nbtrain.backends.slurm.node`` runs on every node on the
way to the first step and must not pay for the backend's imports (the local backend's, ~0.5 s).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbtrain.backends.slurm.backend import SlurmBackend

__all__ = ["SlurmBackend"]


def __getattr__(name: str) -> Any:
    if name == "SlurmBackend":
        from nbtrain.backends.slurm.backend import SlurmBackend

        return SlurmBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
