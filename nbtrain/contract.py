"""The data of the Backend contract (pure): what a dry run returns, what finds a run again, what a backend can do.

Shape borrowed from TorchX (``AppDryRunInfo[SlurmBatchRequest]``): :class:`Plan` is generic in the backend's own
request type ``R``, a frozen dataclass per backend that satisfies :class:`Request` (what ``--dry-run`` prints, and
its JSON form, used only at the process boundary: the attempt's ``plan.json``). The built-in backends' requests
are typed (local: :class:`nbtrain.gang.request.GangRequest`, Slurm:
:class:`nbtrain.backends.slurm.request.SlurmRequest`, Kubernetes:
:class:`nbtrain.backends.kubernetes.request.KubernetesRequest`); a backend installed later may still plan a
``Mapping[str, Any]`` with a ``"describe"`` key: :func:`describe_request` and :func:`request_json` read both.

- :class:`RunHandle`: what finds ONE ATTEMPT of a run again (saved in the RunRecord; survives kernel restarts);
- :class:`Plan`: a pure, printable dry run; :class:`Capabilities`: what a backend honours beyond the generic
  options; :class:`RunCursor`: an incremental reader over one run.

The behaviour (the abstract :class:`nbtrain.backends.base.Backend`) lives in :mod:`nbtrain.backends.base`, which
re-exports these names, so ``from nbtrain.backends.base import Plan`` keeps working.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from nbtrain.model import Batch
from nbtrain.spec import JobSpec

__all__ = ["Capabilities", "Plan", "Request", "RunCursor", "RunHandle", "describe_request", "request_json"]


@runtime_checkable
class Request(Protocol):
    """What every backend's own request type offers (a frozen dataclass per backend).

    - ``describe``: the backend-specific lines ``--dry-run`` prints after the generic ones (:meth:`Plan.render`);
    - ``to_json()``: a JSON object that the request type's own ``from_json`` reads back unchanged. Used only at
      the process boundary (the attempt's ``plan.json``, read by its supervisor); inside a process the typed
      object travels.
    """

    @property
    def describe(self) -> str:
        """What ``--dry-run`` prints of this request."""
        ...

    def to_json(self) -> dict[str, Any]:
        """The JSON form written to ``plan.json``."""
        ...


#: The backend's request type. Unbound on purpose: a ``Mapping[str, Any]`` request (with a ``"describe"`` key) of a
#: backend installed later still type-checks; the built-in backends use a frozen dataclass satisfying :class:`Request`.
R = TypeVar("R")


def describe_request(request: object) -> str | None:
    """What ``--dry-run`` prints of ``request``: its ``describe`` (attribute, or key of a mapping), else None."""
    describe = request.get("describe") if isinstance(request, Mapping) else getattr(request, "describe", None)
    return describe if isinstance(describe, str) else None


def request_json(request: object) -> dict[str, Any]:
    """``request`` as the JSON object written to ``plan.json`` (a :class:`Request`'s ``to_json()``, a mapping as is)."""
    if isinstance(request, Request):
        return request.to_json()
    if isinstance(request, Mapping):
        return dict(request)
    raise TypeError(f"a plan's request must be a Request or a mapping, not {type(request).__name__}")


@dataclass(frozen=True)
class RunHandle:
    """What a backend needs to find ONE ATTEMPT of a run again (saved in the RunRecord; survives kernel restarts).

    ``data["attempt"]`` is the attempt this handle follows. ``submit`` returns the handle of the attempt it
    started, and that is the handle the run keeps from then on (resume replaces it). ``data`` is the backend's
    own JSON object (local: the supervisor's pid; Slurm: the job id; Kubernetes: the workload's kind and name).
    """

    backend: str
    run_id: str
    data: Mapping[str, Any] = field(default_factory=dict)

    @property
    def attempt(self) -> int:
        """The attempt this handle follows (0 for the first launch)."""
        return int(self.data.get("attempt", 0))


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do beyond the generic options. :meth:`Backend.plan` refuses, before anything starts,
    what it rules out (:func:`nbtrain.flags.unsupported_options` reads it).

    ``restarts``: ``--max-restarts`` restarts a failed gang from its latest checkpoint.
    ``checkpoints``: ``nbtrain.save_checkpoint`` has a directory every rank shares (``--checkpoint-dir``,
    ``--keep-checkpoints``). ``gpus``: ranks can be given GPUs (else ``--device gpu`` is refused).
    ``multi_node``: more than one node per gang (else ``--nodes`` above 1 is refused).
    ``shared_store``: ranks write events, logs and the result into the store directly (else they travel
    through the backend's own log channel and are mirrored into the store); informational.
    ``options``: flags of backend-specific options of the table (``nbtrain.flags.OPTIONS``, e.g. ``"--image"``,
    ``"--stall-after"``) that this backend honours although the table does not name it: how a backend installed
    later declares them. The built-in backends are named by the table and declare none here.
    """

    restarts: bool
    checkpoints: bool
    gpus: bool
    multi_node: bool
    shared_store: bool
    options: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Plan(Generic[R]):
    """A dry run: everything ``submit`` will do, printable, with no side effect yet.

    ``request`` is the backend's own request object (local: one command line per node; Slurm: the batch script;
    Kubernetes: the manifests), a :class:`Request`. ``notices`` are one-time facts the user should see (e.g. "no
    GPU: CPU/gloo").
    """

    backend: str
    run_id: str
    spec: JobSpec
    bundle_digest: str
    bundle_dir: str
    request: R
    notices: tuple[str, ...] = ()
    attempt: int = 0

    def render(self) -> str:
        """Human-readable plan (what ``--dry-run`` prints after the capture report)."""
        lines = [
            f"backend:   {self.backend}",
            f"run id:    {self.run_id} (not submitted)" + (f", attempt {self.attempt}" if self.attempt else ""),
            f"gang:      {self.spec.nodes} node(s) x {self.spec.procs} process(es) = world size {self.spec.world_size}",
            f"bundle:    {self.bundle_digest[:16]} at {self.bundle_dir}",
        ]
        lines += [f"note:      {n}" for n in self.notices]
        describe = describe_request(self.request)
        if describe is not None:
            lines.append(describe)
        return "\n".join(lines)


class RunCursor(Protocol):
    """An incremental reader over one run's events and log lines, from the start of the first attempt.

    Each event and each line is returned by exactly one ``poll`` (the cursor keeps its position),
    so a watcher that polls until the run is terminal sees everything exactly once.
    """

    def poll(self, *, max_lines: int = 50_000) -> Batch:
        """Everything new since the previous poll (non-blocking). ``max_lines=0`` skips log lines."""
        ...
