"""What the contract suite needs besides nbtrain: the backend-under-test object, process inspection, waiting.

Process inspection reads /proc directly (never nbtrain's own code), so a backend that loses track of its
processes cannot hide them from the suite. Importable as ``helpers``: conftest.py puts this directory on
sys.path.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import pytest
from procs import pids_with_env

from nbtrain.backends.base import RunHandle
from nbtrain.bundle import capture_cell
from nbtrain.client import Run, attach, submit_bundle
from nbtrain.errors import SpecError
from nbtrain.flags import OPTIONS, Option, unsupported_options
from nbtrain.model import LogLine
from nbtrain.spec import STRATEGY_OPTIONS, JobSpec
from nbtrain.store import Store

__all__ = ["BackendUnderTest", "LineCollector", "drain", "kill_pids", "non_default_values", "pids_with_env",
           "run_processes", "settle", "wait_for", "wait_for_line"]

T = TypeVar("T")

RUN_MARKER = "NBTRAIN_RUN_ID"  # every process of a gang, on every backend
SUPERVISOR_MARKER = "NBTRAIN_SUPERVISOR_OF"  # a local supervisor


# -- processes ----------------------------------------------------------------------------------------
def run_processes(run_id: str) -> list[int]:
    """Live processes of one run: its gang (``NBTRAIN_RUN_ID``) and its local supervisor, if any."""
    return sorted(set(pids_with_env(RUN_MARKER, {run_id})) | set(pids_with_env(SUPERVISOR_MARKER, {run_id})))


def kill_pids(pids: list[int]) -> None:
    """SIGKILL each of ``pids`` (already gone: ignored)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def settle(probe: Callable[[], list[T]], grace_s: float) -> list[T]:
    """``probe()`` polled until it is empty or ``grace_s`` passed; what it returns last."""
    deadline = time.monotonic() + grace_s
    found = probe()
    while found and time.monotonic() < deadline:
        time.sleep(0.1)
        found = probe()
    return found


def wait_for(predicate: Callable[[], T], timeout: float, what: str) -> T:
    """Poll ``predicate`` until it returns something truthy (returned); AssertionError naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def drain(items: Iterable[T], timeout: float, what: str) -> list[T]:
    """``list(items)`` in a helper thread; AssertionError naming ``what`` if it has not ended after ``timeout`` s."""
    out: list[T] = []
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            out.extend(items)
        except BaseException as error:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(error)

    thread = threading.Thread(target=consume, name="contract-drain", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise AssertionError(f"{what} did not end within {timeout:.0f} s ({len(out)} items so far)")
    if errors:
        raise errors[0]
    return out


# -- options ----------------------------------------------------------------------------------------
# Values JobSpec accepts for every option of a kind, tried in order (ints and floats come from the option's limits).
_TEXT_VALUES: Mapping[str, tuple[Any, ...]] = {
    "str": ("1",),  # "1" is a name, an image, a path, a quantity and a Slurm time limit (minutes) alike
    "pairs": ({"x": "s/k"}, {"comment": "s/k"}),  # an environment name, a label; an sbatch option (a long name)
    "tolerations": (({"key": "k", "effect": "NoSchedule"},),),
    "list": (("x:/mnt",), ("X",)),  # a CLAIM:/PATH volume and a Secret name alike; an --env-public NAME
}


def _candidates(option: Option) -> list[Any]:
    """Values of ``option`` other than its default, most ordinary first."""
    default = getattr(option.default, "value", option.default)
    if option.kind == "switch":
        values: list[Any] = [not default]
    elif option.kind == "choice":
        values = list(option.choices)
    elif option.kind == "int":
        low, high = option.limits or (0, 1_000)
        start = default if isinstance(default, int) else low
        values = [v for v in (start + 1, start - 1, low, high) if low <= v <= high]
    elif option.kind == "float":
        above, highest = option.number_limits or (0.0, 3600.0)
        values = [v for v in (60.0, float(highest)) if above < v <= highest]
    else:
        values = list(_TEXT_VALUES.get(option.kind, ()))
    return [v for v in values if v != default]


def non_default_values(base: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """For every option of the table that sets a JobSpec field: overrides of ``base`` (JobSpec keyword arguments)
    that give it a non-default value JobSpec accepts, with what that value needs (``--strategy fsdp`` for
    ``--fsdp-version``). AssertionError naming the option when no value of its kind is valid: teach
    ``_candidates`` the new kind or rule."""
    found: dict[str, dict[str, Any]] = {}
    for option in OPTIONS:
        if option.field is None:
            continue
        needs = {"strategy": STRATEGY_OPTIONS[option.field][1]} if option.field in STRATEGY_OPTIONS else {}
        for value in _candidates(option):
            overrides = {**needs, option.field: value}
            try:
                JobSpec(**{**base, **overrides})
            except SpecError:
                continue
            found[option.field] = overrides
            break
        else:
            raise AssertionError(f"no non-default value of {option.flag} ({option.kind}) that JobSpec accepts among "
                                 f"{_candidates(option)!r}: add one to tests/contract/helpers.py")
    return found


# -- output -------------------------------------------------------------------------------------------
class LineCollector:
    """Every log line a cursor delivers, in delivery order."""

    def __init__(self, poll: Callable[[], Any]) -> None:
        self.poll = poll
        self.lines: list[LogLine] = []

    def read(self) -> int:
        """Poll once; how many lines arrived."""
        batch = self.poll()
        self.lines.extend(batch.lines)
        return len(batch.lines)

    def texts(self, rank: int, prefix: str = "") -> list[str]:
        """Texts of ``rank``'s lines that start with ``prefix``."""
        return [line.text for line in self.lines if line.rank == rank and line.text.startswith(prefix)]


def wait_for_line(under_test: BackendUnderTest, run_id: str, text: str, timeout: float = 60) -> None:
    """Block until some rank of ``run_id`` printed the line ``text`` (read through a cursor of its own)."""
    lines = LineCollector(under_test.cursor(run_id).poll)

    def seen() -> bool:
        lines.read()
        return any(line.text == text for line in lines.lines)

    wait_for(seen, timeout, f"run {run_id} to print {text!r}")


# -- the backend under test ---------------------------------------------------------------------------
class BackendUnderTest:
    """One backend as the contract suite drives it: submit, attach, its processes, its controller.

    A backend joins the suite with one fixture (see conftest.py) that returns a subclass of this. Subclasses
    set the class attributes and implement :meth:`kill_controller`, :meth:`footprint`, :meth:`leftovers` and
    :meth:`on_store`, and :meth:`refusing_submits` where the backend's submit can be made to fail for a real reason.
    What a backend refuses is not declared here: :attr:`refused` reads it from the options table.
    """

    #: the backend's name (``JobSpec.backend``)
    name: str = ""
    #: True when the gang goes on without the process that follows it (that process only watches)
    gang_outlives_controller: bool = False

    def __init__(self, store: Store, backend: Any, **spec_defaults: Any) -> None:
        self.store = store
        self.backend = backend
        self.spec_defaults = {"backend": self.name, "device": "cpu", **spec_defaults}
        self.runs: list[Run] = []

    def __repr__(self) -> str:
        return f"<{self.name} backend under test on {self.store.root}>"

    @property
    def refused(self) -> dict[str, dict[str, Any]]:
        """Every option the options table says this backend does not honour (with this backend's spec defaults):
        ``JobSpec`` field -> overrides that set it to a valid non-default value.

        Read through :func:`nbtrain.flags.unsupported_options` (the table's own rule), so an option that a backend
        stops honouring, or a new option, is in the refusal test without an edit here.
        """
        assert not unsupported_options(self.spec(), self.name), (
            f"the {self.name} backend refuses its own spec defaults {self.spec_defaults}: "
            f"{unsupported_options(self.spec(), self.name)}")
        return {field: overrides for field, overrides in non_default_values(self.spec_defaults).items()
                if unsupported_options(self.spec(**overrides), self.name)}

    def spec(self, **overrides: Any) -> JobSpec:
        """A JobSpec for this backend: CPU ranks, this backend's defaults, then ``overrides``."""
        return JobSpec(**{**self.spec_defaults, **overrides})

    def submit(self, source: str, **overrides: Any) -> Run:
        """Submit ``source`` as the body of a ``%%distributed`` cell (so body line 1 is cell line 2) with
        ``spec(**overrides)``; the watched Run."""
        bundle = capture_cell(source, {"__name__": "__main__"})
        run = submit_bundle(bundle, self.spec(**overrides), store=self.store, backend=self.backend)
        self.runs.append(run)
        return run

    def attach(self, run_id: str, *, watch: bool = False) -> Run:
        """``nbtrain.client.attach`` on this store, as a new kernel would."""
        run = attach(run_id, store=self.store, watch=watch)
        self.runs.append(run)
        return run

    def handle(self, run_id: str) -> RunHandle:
        """The backend handle of ``run_id`` as the store keeps it (the one a new kernel would use)."""
        return RunHandle(self.name, run_id, self.store.load(run_id).handle)

    def cursor(self, run_id: str) -> Any:
        """A fresh cursor over ``run_id``'s events and lines, from the beginning."""
        return self.backend.cursor(self.handle(run_id))

    def processes(self, run_id: str) -> list[int]:
        """Live processes of ``run_id`` on this machine (every backend marks its gang with the run id)."""
        return run_processes(run_id)

    def kill_controller(self, run: Run) -> None:
        """End, as abruptly as a crash would, whatever this machine runs to control or follow ``run``."""
        raise NotImplementedError

    def footprint(self) -> list[str]:
        """What this backend started or created outside the run store (processes, API objects), described."""
        raise NotImplementedError

    def leftovers(self) -> list[str]:
        """What of this backend still runs or is held for this store's runs (processes, jobs, API objects),
        described: empty once every run is terminal and cleaned up."""
        raise NotImplementedError

    @contextlib.contextmanager
    def refusing_submits(self) -> Iterator[str]:
        """Inside: the backend's ``submit`` fails for a real reason (the cluster refuses), before any gang starts
        (a backend that asks the cluster while planning refuses in ``plan`` instead); yields words the error names.
        Skips the test where there is no such reason to give."""
        pytest.skip(f"the {self.name} backend's submit cannot be made to fail for a real reason here")
        yield ""

    def on_store(self, store: Store) -> BackendUnderTest:
        """The same backend, on another run store."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop following every run of this object; cancel those still going (terminal ones are left as they are,
        so the ``home`` fixture still reports processes a finished run left behind)."""
        for run in self.runs:
            run.stop_watching()
        for run_id in dict.fromkeys(run.id for run in self.runs):
            try:
                handle = self.handle(run_id)
                if not self.backend.status(handle).state.terminal:
                    self.backend.cancel(handle)
            except Exception:  # noqa: BLE001 - teardown goes on; the home fixture reports leftovers
                pass
