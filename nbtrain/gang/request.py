"""The request of a gang attempt: what ``plan`` decided and the attempt's supervisor reads (pure, frozen).

A :class:`GangRequest` is the ``request`` of a local :class:`~nbtrain.contract.Plan` (the Slurm backend's
:class:`~nbtrain.backends.slurm.request.SlurmRequest` extends it) and what the gang engine
(:mod:`nbtrain.gang.engine`) supervises: the run and attempt, the gang's shape (one :class:`Launcher` per node),
where the attempt lives, the bundle, the generated Accelerate config, the restart budget and the limits the
engine watches. Inside a process the object travels as it is; :meth:`GangRequest.to_json` is its JSON form, the
attempt's ``plan.json`` (:func:`nbtrain.gang.files.write_attempt_files`), read back by
:meth:`GangRequest.from_json` in the supervisor's process.

``plan.json`` across versions: ``to_json`` writes every key the previous version wrote, the derived ones included
(``events_dir``, ``logs_dir``, ``tmp_dir``: the attempt directory's layout), so a supervisor of the previous version
(a Slurm cluster's ``NBTRAIN_PYTHON`` need not be the kernel's) still reads it; ``from_json`` reads a previous
version's file (keys it does not know are ignored; the optional ones it misses take their defaults: no timeouts,
no notices, a restart budget of the attempt itself) and refuses one without a required key, naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nbtrain.gang.files import AttemptLayout
from nbtrain.store import read_json

__all__ = ["AccelerateConfig", "GangRequest", "Launcher", "PlanFileError", "WarmRequest", "gang_fields", "read_plan"]


class PlanFileError(ValueError):
    """An attempt's ``plan.json`` that is not a request of this nbtrain: what is missing or malformed, and the fix."""


@dataclass(frozen=True)
class Launcher:
    """What starts one node's ranks: the node, its global ranks and, when known at planning, its command.

    A local launcher is a whole ``accelerate launch`` command (``argv``, its environment over the supervisor's,
    ``cwd``) and the GPU ids it was given; a Slurm launcher is only the node and its ranks (its command is built
    on the node: :mod:`nbtrain.backends.slurm.node`), the rest left empty.
    """

    node: int
    ranks: tuple[int, ...]
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = ""
    gpus: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """This launcher as a JSON object."""
        return {"node": self.node, "argv": list(self.argv), "env": dict(self.env), "cwd": self.cwd,
                "ranks": list(self.ranks), "gpus": list(self.gpus)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Launcher:
        """The launcher :meth:`to_json` wrote (a Slurm launcher of the previous version: node and ranks only)."""
        return cls(node=int(_required(data, "node", "a launcher")),
                   ranks=tuple(int(r) for r in _required(data, "ranks", "a launcher")),
                   argv=tuple(str(a) for a in data.get("argv") or ()),
                   env={str(k): str(v) for k, v in (data.get("env") or {}).items()},
                   cwd=str(data.get("cwd") or ""), gpus=tuple(str(g) for g in data.get("gpus") or ()))


@dataclass(frozen=True)
class AccelerateConfig:
    """The generated Accelerate config of an attempt: where the launchers read it (``path``) and its ``text``."""

    path: str
    text: str


@dataclass(frozen=True)
class WarmRequest:
    """``--warm``: the run's ranks are forked from a warm gang (:mod:`nbtrain.warm`) of the idle TTL ``ttl_s``;
    ``gang_dir`` is the gang the run claimed (None until ``submit`` claims one)."""

    ttl_s: float
    gang_dir: str | None = None

    def to_json(self) -> dict[str, Any]:
        """This warm request as a JSON object (``gang_dir`` only once known, as the previous version wrote it)."""
        return {"ttl_s": self.ttl_s, **({"gang_dir": self.gang_dir} if self.gang_dir is not None else {})}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WarmRequest:
        """The warm request :meth:`to_json` wrote."""
        gang_dir = data.get("gang_dir")
        return cls(ttl_s=float(_required(data, "ttl_s", "the warm request")),
                   gang_dir=None if gang_dir is None else str(gang_dir))


@dataclass(frozen=True, kw_only=True)
class GangRequest:
    """One attempt of a run as a gang of launchers (see the module docstring).

    ``attempt_dir``: the attempt's directory in the store (``store_root``), whose layout
    (:class:`~nbtrain.gang.files.AttemptLayout`) gives ``events_dir``, ``logs_dir`` and ``tmp_dir``.
    ``restart_budget``: the last attempt automatic restarts may reach. ``timeout_s``, ``stall_after_s``,
    ``hang_timeout_s``: the limits the engine watches (None: none). ``port``: the rendezvous port chosen at
    planning (local; None where it is chosen when the gang starts). ``describe``: what ``--dry-run`` prints after
    the generic lines.
    """

    run_id: str
    attempt: int
    world_size: int
    use_gpu: bool
    launchers: tuple[Launcher, ...]
    attempt_dir: str
    store_root: str
    bundle_dir: str
    bundle_digest: str
    accelerate_config: AccelerateConfig
    restart_budget: int
    timeout_s: float | None = None
    stall_after_s: float | None = None
    hang_timeout_s: float | None = None
    notices: tuple[str, ...] = ()
    describe: str = ""
    port: int | None = None
    warm: WarmRequest | None = None

    # -- derived ----------------------------------------------------------------------------------
    @property
    def layout(self) -> AttemptLayout:
        """The attempt directory's files."""
        return AttemptLayout(Path(self.attempt_dir))

    @property
    def events_dir(self) -> Path:
        """Where the ranks and the supervisor write their events."""
        return self.layout.events

    @property
    def logs_dir(self) -> Path:
        """Where each rank's and each launcher's output goes."""
        return self.layout.logs

    @property
    def tmp_dir(self) -> Path:
        """The launchers' TMPDIR (removed after the attempt)."""
        return self.layout.tmp

    @property
    def nodes(self) -> int:
        """How many nodes the gang has (one launcher each)."""
        return len(self.launchers)

    def on_warm_gang(self, gang_dir: Path) -> GangRequest:
        """This request with the warm gang it claimed (``submit``); a request without ``--warm`` is refused."""
        if self.warm is None:
            raise ValueError(f"run {self.run_id} was not planned with --warm: it claims no warm gang ({gang_dir})")
        return replace(self, warm=replace(self.warm, gang_dir=str(gang_dir)))

    # -- JSON -------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """This request as a JSON object: ``plan.json`` (the derived directories included, see the module)."""
        data: dict[str, Any] = {
            "run_id": self.run_id, "attempt": self.attempt, "world_size": self.world_size, "use_gpu": self.use_gpu,
            "launchers": [launcher.to_json() for launcher in self.launchers],
            "events_dir": str(self.events_dir), "logs_dir": str(self.logs_dir), "tmp_dir": str(self.tmp_dir),
            "attempt_dir": self.attempt_dir, "timeout_s": self.timeout_s, "stall_after_s": self.stall_after_s,
            "hang_timeout_s": self.hang_timeout_s, "restart_budget": self.restart_budget,
            "store_root": self.store_root,
            "accelerate_config": {"path": self.accelerate_config.path, "text": self.accelerate_config.text},
            "bundle_dir": self.bundle_dir, "bundle_digest": self.bundle_digest, "notices": list(self.notices),
            "describe": self.describe,
        }
        if self.port is not None:
            data["port"] = self.port
        if self.warm is not None:
            data["warm"] = self.warm.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GangRequest:
        """The request :meth:`to_json` wrote, or the previous version's ``plan.json`` (see the module docstring).

        PlanFileError (a ValueError) naming the key when a required one is missing, or what is malformed.
        """
        return cls(**gang_fields(data))

    @classmethod
    def load(cls, path: Path) -> GangRequest:
        """The request in ``path`` (an attempt's ``plan.json``); ValueError naming the file when it is damaged."""
        return cls.from_json(read_plan(path))


def gang_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """The :class:`GangRequest` fields of ``data`` (a ``plan.json`` object), for the ``from_json`` of a request
    type that extends it; PlanFileError naming a missing required key or saying what is malformed."""
    try:
        return _gang_fields(data)
    except PlanFileError:
        raise
    except (TypeError, AttributeError, ValueError) as error:  # a value of the wrong kind (null, "two" for a number)
        raise PlanFileError(f"the attempt's request is malformed ({error}); plan.json written by another nbtrain, "
                            "or edited: resume the run to plan its attempt again") from None


def _gang_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    what = "the attempt's request"
    attempt = int(_required(data, "attempt", what))
    config = _required(data, "accelerate_config", what)
    warm = data.get("warm")
    port = data.get("port")
    return {
        "run_id": str(_required(data, "run_id", what)), "attempt": attempt,
        "world_size": int(_required(data, "world_size", what)), "use_gpu": bool(_required(data, "use_gpu", what)),
        "launchers": tuple(Launcher.from_json(x) for x in _required(data, "launchers", what)),
        "attempt_dir": str(_required(data, "attempt_dir", what)),
        "store_root": str(_required(data, "store_root", what)),
        "bundle_dir": str(_required(data, "bundle_dir", what)),
        "bundle_digest": str(_required(data, "bundle_digest", what)),
        "accelerate_config": AccelerateConfig(path=str(_required(config, "path", "the accelerate config")),
                                              text=str(_required(config, "text", "the accelerate config"))),
        "restart_budget": int(data.get("restart_budget", attempt)),
        "timeout_s": data.get("timeout_s"), "stall_after_s": data.get("stall_after_s"),
        "hang_timeout_s": data.get("hang_timeout_s"), "notices": tuple(str(n) for n in data.get("notices") or ()),
        "describe": str(data.get("describe") or ""), "port": None if port is None else int(port),
        "warm": WarmRequest.from_json(warm) if warm else None,
    }


def read_plan(path: Path) -> Mapping[str, Any]:
    """The JSON object of the ``plan.json`` at ``path``; a ValueError naming the file when it is not one (OSError
    when it cannot be read)."""
    data = read_json(path)
    if not isinstance(data, Mapping):
        raise PlanFileError(f"{path}: not an attempt's request (a JSON {type(data).__name__}, not an object); the "
                            "file is damaged: move its run directory out of the store")
    return data


def _required(data: Mapping[str, Any], key: str, what: str) -> Any:
    try:
        return data[key]
    except (KeyError, TypeError):
        raise PlanFileError(f"{what} has no {key!r} (plan.json written by another nbtrain, or edited); resume the "
                            "run to plan its attempt again") from None
