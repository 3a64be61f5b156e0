"""The Slurm backend's own request: a gang request plus what the batch job and each node's launcher need (pure).

A :class:`SlurmRequest` is the ``request`` of a Slurm :class:`~nbtrain.contract.Plan`. It extends
:class:`~nbtrain.gang.request.GangRequest` (what the gang engine supervises: its launchers are only each node's
ranks) with the facts only Slurm's side reads: the job's spec (each node builds its ``accelerate launch`` from it,
:mod:`.node`; a restart in a new allocation plans from it), the interpreter, working directory and environment of
every node, and the batch job (``sbatch_options``, ``script``). Its JSON form is flat, the gang's keys and these side
by side in ``plan.json`` (with ``nodes``, as the previous version wrote it); :meth:`SlurmRequest.from_json` reads it
back, and :meth:`GangRequest.from_json` reads the gang's part of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbtrain.gang.request import GangRequest, PlanFileError, gang_fields, read_plan
from nbtrain.spec import JobSpec

__all__ = ["SlurmRequest"]


@dataclass(frozen=True, kw_only=True)
class SlurmRequest(GangRequest):
    """One attempt of a run as one ``sbatch`` job (see the module docstring).

    ``spec``: the job as planned (a restart in a new allocation excludes the node the previous one lost).
    ``python``, ``cwd``, ``env``: the interpreter, working directory and environment of every node's launcher (the
    node adds its rank and device). ``sbatch_options``: the ``#SBATCH`` options of ``script``, the batch script.
    """

    spec: JobSpec
    python: str
    cwd: str
    env: Mapping[str, str]
    sbatch_options: tuple[str, ...]
    script: str

    @classmethod
    def of(cls, request: GangRequest) -> SlurmRequest:
        """``request`` as a Slurm request (what a Slurm attempt's supervisor loaded); TypeError when it is not one."""
        if not isinstance(request, SlurmRequest):
            raise TypeError(f"attempt {request.attempt} of {request.run_id} ({request.attempt_dir}) is not a Slurm "
                            f"attempt: its request is a {type(request).__name__}")
        return request

    def to_json(self) -> dict[str, Any]:
        """This request as a JSON object: ``plan.json`` (the gang's keys, then Slurm's)."""
        return {**super().to_json(), "nodes": self.nodes, "spec": self.spec.to_dict(), "python": self.python,
                "cwd": self.cwd, "env": dict(self.env), "sbatch_options": list(self.sbatch_options),
                "script": self.script}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SlurmRequest:
        """The request :meth:`to_json` wrote, or the previous version's ``plan.json``; PlanFileError (a ValueError)
        naming a missing key or what is malformed (see :mod:`nbtrain.gang.request`)."""
        gang = gang_fields(data)
        try:
            return cls(**gang, spec=JobSpec.from_dict(data["spec"]), python=str(data["python"]),
                       cwd=str(data["cwd"]), env={str(k): str(v) for k, v in data["env"].items()},
                       sbatch_options=tuple(str(o) for o in data.get("sbatch_options") or ()),
                       script=str(data.get("script") or ""))
        except KeyError as missing:
            raise PlanFileError(f"the Slurm attempt's request has no {missing} (plan.json written by another nbtrain, "
                                "or edited); resume the run to plan its attempt again") from None
        except (TypeError, AttributeError, ValueError) as error:
            raise PlanFileError(f"the Slurm attempt's request is malformed ({error}); plan.json written by another "
                                "nbtrain, or edited: resume the run to plan its attempt again") from None

    @classmethod
    def load(cls, path: Path) -> SlurmRequest:
        """The Slurm request in ``path`` (an attempt's ``plan.json``); ValueError when it is damaged."""
        return cls.from_json(read_plan(path))
