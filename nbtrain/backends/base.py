"""The Backend contract every engine implements (local processes, Kubernetes, later Slurm/Ray).

Shape borrowed from TorchX: a pure, printable dry run (:meth:`Backend.plan`) that returns the backend's
own request, and thin I/O methods around it. The contract is a type, not a docstring:

- :class:`Backend` is an abstract base with template methods. ``plan`` refuses every option the backend
  does not honour (:func:`nbtrain.flags.check_supported`) before the backend's own ``_plan`` runs, and a strategy
  whose optional packages the ranks' interpreter lacks after it (:mod:`nbtrain.backends.extras`);
  ``cancel`` is idempotent in the base (terminal check, then ``_cancel_existing``);
- :class:`StoreBackedBackend` reads what every backend keeps in the store the same way (cursor, events,
  paged logs, list), so an engine only says how to start, observe and stop its gang;
- :class:`Capabilities` declares what a backend can do beyond the generic options; ``plan`` reads it to honour
  or refuse the backend-specific ones (:func:`nbtrain.flags.unsupported_options`).

The same contract test-suite (``tests/contract``) runs on every backend. Backends are found through the
``nbtrain.backends`` entry-point group (see :mod:`nbtrain.backends`; writing one: docs/backends.md).
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from nbtrain.contract import Capabilities, Plan, Request, RunCursor, RunHandle
from nbtrain.events import Event
from nbtrain.model import Batch, Failure, LogLine, LogPage, RunState, RunStatus
from nbtrain.spec import JobSpec
from nbtrain.store import Store

if TYPE_CHECKING:
    from nbtrain.doctor import Check

__all__ = [
    "Backend",
    "Batch",
    "Capabilities",
    "Failure",
    "LogLine",
    "LogPage",
    "Plan",
    "Request",
    "RunCursor",
    "RunHandle",
    "RunState",
    "RunStatus",
    "StoreBackedBackend",
]


class Backend(abc.ABC):
    """A place where gangs run. Every method is safe to call from any thread.

    Subclasses set ``name`` and ``capabilities`` and implement the ``_plan``/``submit``/``status``/
    ``cursor``/``log_page``/``_cancel_existing``/``list`` primitives; the public template methods here
    hold the rules every backend shares.

    Writing a backend (docs/backends.md), the contract:

    - Register the class in the ``nbtrain.backends`` entry-point group under ``name`` (the ``--backend`` value):
      JobSpec, the flags, nbtrain.toml and ``nbtrain doctor`` then accept it; nothing in nbtrain is edited.
    - Honour every generic option (``Option.backends`` None in :mod:`nbtrain.flags.table`): the gang's shape
      (``--nodes``, ``--gpus``, ``--device``), the strategy and its options, ``--mixed-precision``, ``--env``,
      ``--timeout``, ``--collective-timeout``. Launching each node with :func:`nbtrain.backends.launch.accelerate_argv`
      and :func:`nbtrain.backends.accelerate_config.accelerate_config` does.
    - Every backend-specific option of the others is refused by :meth:`plan` automatically, naming the option and
      this backend; honour one by declaring it in ``capabilities`` (``options``, or ``checkpoints``/``restarts``
      for the checkpoint options), and ``multi_node``/``gpus`` False refuse ``--nodes`` above 1 and ``--device gpu``.
    - ``_plan`` is pure: it returns a :class:`Plan` whose ``request`` is the backend's own request object (a
      frozen dataclass satisfying :class:`nbtrain.contract.Request`) whose ``describe`` is what ``--dry-run``
      prints; it starts and writes nothing. ``plan_restart`` plans an automatic restart (``capabilities.restarts``).
    - Hooks with defaults: ``close`` (background threads), ``doctor_checks`` (``nbtrain doctor``), ``check_export``
      (``nbtrain validate``/export), ``before_log_read`` (mirroring backends).
    - Ranks report through the store layout (``runs/<id>/attempts/<n>/{events,logs}``): subclass
      :class:`StoreBackedBackend` and cursors, events, paged logs and the run list come for free.
    - The contract suite (``tests/contract``) runs on it once it registers a fixture there.
    """

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]

    def __init__(self, store: Store | None = None) -> None:
        self.store = store or Store()

    # -- plan (pure) ----------------------------------------------------------------------------
    def plan(self, spec: JobSpec, bundle_dir: str, bundle_digest: str, run_id: str, *, attempt: int = 0) -> Plan:
        """Pure dry run of ``attempt`` of ``run_id``: validate ``spec`` against this backend and describe the launch.

        Every option the backend does not honour is refused first (SpecError naming the option, the
        backend and what to do instead). Raises SpecError/EnvironmentProblem for what cannot run here.
        Starts nothing, writes nothing.
        """
        from nbtrain.backends.extras import require_strategy_packages
        from nbtrain.flags import check_supported
        from nbtrain.secrets import refuse_secret_env

        check_supported(spec, self.name, self.capabilities)
        refuse_secret_env(spec.env, backend=self.name, allow=spec.allow_secrets)
        plan = self._plan(spec, bundle_dir, bundle_digest, run_id, attempt=attempt)
        python = self.ranks_python()  # after _plan: a strategy this device refuses is the clearer error
        if python is not None:
            require_strategy_packages(spec, python)
        return plan

    def ranks_python(self) -> str | None:
        """The interpreter the ranks run, when this machine can look into it, else None.

        ``plan`` checks there that the strategy's optional packages (DeepSpeed) are installed
        (:mod:`nbtrain.backends.extras`). Default: the backend's ``python`` attribute when it has one (the local
        backend's; a Slurm cluster's, on a filesystem every node shares). A backend whose ranks run elsewhere (in
        an image) returns None and checks there.
        """
        python = getattr(self, "python", None)
        return python if isinstance(python, str) else None

    @abc.abstractmethod
    def _plan(self, spec: JobSpec, bundle_dir: str, bundle_digest: str, run_id: str, *, attempt: int) -> Plan:
        """The backend's own dry run (``spec`` is already known to be supported)."""

    def plan_restart(self, spec: JobSpec, bundle_dir: str, bundle_digest: str, run_id: str, *, attempt: int,
                     restart_budget: int, previous: Any = None) -> Plan:
        """The plan of automatic restart ``attempt`` of ``run_id`` (the gang engine's; pure like :meth:`plan`).

        Called by whoever restarts a failed attempt (the supervisor of a local or Slurm gang, the Kubernetes
        attempt follower) with the run's ``spec`` and bundle; ``restart_budget`` is the last attempt number the
        run's automatic restarts may reach (the first attempt's, unchanged); ``previous`` is the failed attempt's
        request (the backend's own request type, as its supervisor read it back from ``plan.json``; typed ``Any``
        here because each override names its own), from which a backend keeps what the restart must not decide
        again (the device Slurm chose, the working directory). The same checkpoint root
        as the earlier attempts. The options were checked when the run was first planned: they are not refused
        again, only the backend's own facts are. Default: refused (a backend without ``capabilities.restarts``).
        """
        from nbtrain.errors import BackendError

        raise BackendError(f"the {self.name} backend does not restart runs (capabilities.restarts is "
                           f"{self.capabilities.restarts}): attempt {attempt} of {run_id} cannot be planned; "
                           "resume the run by hand")

    # -- hooks: what used to be name branches outside the backends (defaults: nothing to do) ------------------
    def close(self, timeout_s: float = 10.0) -> None:
        """Stop this backend's background work in this process (threads, log mirrors) within ``timeout_s``.

        Called when the process that used the backend is about to exit (the tracking agent, the kernel's
        shutdown). Idempotent; a run is never ended by it (another process takes its following over). Default:
        nothing runs in the background.
        """
        return None

    def doctor_checks(self, settings: Mapping[str, Any]) -> list[Check]:
        """This backend's own checks for ``nbtrain doctor`` (client, controller, access, shared store), in order.

        ``settings``: the backend's section of ./nbtrain.toml (``[<name>]``) with the command line's values over
        it (e.g. ``{"partition": "gpu"}`` for Slurm). Each check names what failed, the value and the fix; a check
        that cannot run because an earlier one failed says so. Bounded in time (short timeouts). Default: none.
        """
        return []

    def check_export(self, spec: JobSpec, bundle: Any) -> str | None:
        """Check, starting nothing, that ``spec`` (with the captured ``bundle``) would run here as exported.

        Used by ``nbtrain validate`` and export: e.g. the Kubernetes backend renders and schema-checks its
        manifests. Returns a one-line summary for the report, or None when this backend has nothing of its own
        to check. Raises SpecError naming the option and the fix for what this backend refuses. Default: None.
        """
        return None

    # -- I/O ------------------------------------------------------------------------------------
    @abc.abstractmethod
    def submit(self, plan: Plan) -> RunHandle:
        """Start the gang of ``plan`` (one attempt) and return its handle at once (does not wait for ranks).

        If anything fails, nothing of the attempt is left running and the error is raised.
        """

    @abc.abstractmethod
    def status(self, handle: RunHandle) -> RunStatus:
        """The state of ``handle``'s attempt (or of a later automatic restart of it).

        A run whose controller vanished without a verdict reports FAILED with the reason, and only once
        none of its processes is left: a terminal run never leaves a process.
        """

    @abc.abstractmethod
    def cursor(self, handle: RunHandle) -> RunCursor:
        """A fresh cursor positioned at the beginning of the run (every attempt: backfill, then follow)."""

    def events(self, handle: RunHandle, *, follow: bool = False, poll_s: float = 0.2) -> Iterator[Event]:
        """Every event of the run in per-source order, each exactly once.

        - ``follow=False``: what exists now, then stop.
        - ``follow=True``: keep yielding until the run is terminal and everything is read.
        """
        from nbtrain.backends.storecursor import follow_events

        return follow_events(self.cursor(handle), lambda: self.status(handle).state.terminal,
                             follow=follow, poll_s=poll_s)

    @abc.abstractmethod
    def log_page(self, handle: RunHandle, rank: int, start: int, limit: int, *, attempt: int | None = None) -> LogPage:
        """Up to ``limit`` lines of global rank ``rank``'s output from line ``start`` (negative: from the end).

        ``attempt`` None means the handle's attempt. Reads by seeking (cost independent of the log's size).
        An unknown rank or a rank that has not started gives an empty page.
        """

    def logs(self, handle: RunHandle, rank: int, *, tail: int | None = None, attempt: int | None = None) -> list[str]:
        """Lines of one rank, oldest first: the last ``tail`` lines, or (``tail`` None) the whole log.

        Reading a whole log is for small logs and exports; readers of live runs use :meth:`log_page`.
        """
        if tail is not None:
            return list(self.log_page(handle, rank, -tail, tail, attempt=attempt).lines) if tail > 0 else []
        out: list[str] = []
        while True:
            page = self.log_page(handle, rank, len(out), 10_000, attempt=attempt)
            out.extend(page.lines)
            if len(page.lines) < 10_000:
                return out

    def cancel(self, handle: RunHandle) -> None:
        """End every process of the run; returns once it is terminal. Idempotent: a finished run is left as it is."""
        if self.status(handle).state.terminal:
            self._after_terminal(handle)
            return
        self._cancel_existing(handle)

    @abc.abstractmethod
    def _cancel_existing(self, handle: RunHandle) -> None:
        """Cancel a run that was not terminal a moment ago; return once it is terminal."""

    def _after_terminal(self, handle: RunHandle) -> None:
        """Called by ``cancel`` on a terminal run: end anything a crashed controller left (default: nothing)."""
        return None

    @abc.abstractmethod
    def list(self) -> list[RunHandle]:
        """Every run this backend knows of, newest first."""


class StoreBackedBackend(Backend):
    """A backend whose runs are read from the store layout (``runs/<id>/attempts/<n>/{events,logs}``).

    The local backend's ranks write those files themselves; other backends mirror their gang's output into
    them. Either way cursors, events, paged logs and the run list read the same files.
    """

    def cursor(self, handle: RunHandle) -> RunCursor:
        """See :meth:`Backend.cursor`."""
        from nbtrain.backends.storecursor import StoreCursor

        return StoreCursor(self.store, handle.run_id)

    def log_path(self, handle: RunHandle, rank: int, attempt: int | None = None) -> Path:
        """The store file of ``rank``'s log in ``attempt`` (default: the handle's)."""
        chosen = handle.attempt if attempt is None else attempt
        return self.store.attempt_dir(handle.run_id, chosen) / "logs" / f"rank-{rank}.log"

    def log_page(self, handle: RunHandle, rank: int, start: int, limit: int, *, attempt: int | None = None) -> LogPage:
        """See :meth:`Backend.log_page`."""
        from nbtrain.logpage import read_page

        if rank < 0:
            return LogPage()
        self.before_log_read(handle)
        return read_page(self.log_path(handle, rank, attempt), start, limit)

    def before_log_read(self, handle: RunHandle) -> None:
        """Hook called before every paged log read of ``handle``: make the store's copy of its logs current.

        A backend whose ranks write the store directly has nothing to do (the default). A mirroring backend
        (Kubernetes) copies a finished pod's log into the store first, waiting a bounded time; it never raises
        for a log that cannot be copied (the page then shows what the store has).
        """
        return None

    def list(self) -> list[RunHandle]:
        """Runs in the store that used this backend, newest first."""
        return [RunHandle(self.name, r.run_id, r.handle) for r in self.store.records() if r.backend == self.name]


def handles_equal(a: RunHandle, b: RunHandle) -> bool:
    """Same backend, run and attempt (what a watcher compares to notice a resume)."""
    return (a.backend, a.run_id, a.attempt) == (b.backend, b.run_id, b.attempt)


def known_keys(data: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """``data`` restricted to ``keys`` (what a handle keeps of a request)."""
    return {k: data[k] for k in keys if k in data}
