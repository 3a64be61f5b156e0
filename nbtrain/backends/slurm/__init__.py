"""The Slurm backend: one ``sbatch`` job per attempt; the nbtrain supervisor runs inside the allocation.

Modules: :mod:`.script` (pure: the batch script and the per-node command), :mod:`.jobstate` (pure: Slurm's job
records and states to nbtrain's), :mod:`.cli` (the only module that runs Slurm's commands), :mod:`.supervisor`
(the batch script's program), :mod:`.node` (what ``srun`` starts on each node), :mod:`.backend`.
"""

from nbtrain.backends.slurm.backend import SlurmBackend

__all__ = ["SlurmBackend"]
