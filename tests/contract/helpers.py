"""What the contract suite needs besides nbtrain: the backend-under-test object, process inspection, waiting.

Process inspection reads /proc directly (never nbtrain's own code), so a backend that loses track of its
processes cannot hide them from the suite. Importable as ``helpers``: conftest.py puts this directory on
sys.path.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, TypeVar

from procs import pids_with_env

from nbtrain.backends.base import RunHandle
from nbtrain.bundle import capture_cell
from nbtrain.client import Run, attach, submit_bundle
from nbtrain.model import LogLine
from nbtrain.spec import JobSpec
from nbtrain.store import Store

__all__ = ["BackendUnderTest", "LineCollector", "drain", "kill_pids", "pids_with_env", "run_processes", "settle",
           "wait_for", "wait_for_line"]

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
    set the class attributes and implement :meth:`kill_controller`, :meth:`footprint` and :meth:`on_store`.
    """

    #: the backend's name (``JobSpec.backend``)
    name: str = ""
    #: options this backend refuses, each with a non-default value (``JobSpec`` field -> value)
    refused: ClassVar[Mapping[str, Any]] = {}
    #: True when the gang goes on without the process that follows it (that process only watches)
    gang_outlives_controller: bool = False

    def __init__(self, store: Store, backend: Any, **spec_defaults: Any) -> None:
        self.store = store
        self.backend = backend
        self.spec_defaults = {"backend": self.name, "device": "cpu", **spec_defaults}
        self.runs: list[Run] = []

    def __repr__(self) -> str:
        return f"<{self.name} backend under test on {self.store.root}>"

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
