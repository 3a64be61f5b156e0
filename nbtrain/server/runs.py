"""Run summaries for the REST API and the runs panel (wire models, separate from persistence).

A row is :class:`nbtrain.model.RunSummary` (schema: ``nbtrain/schemas/run-summary.schema.json``), built
from the run's snapshot through the read interface (:class:`nbtrain.reader.RunReader`); the detail and the
handlers use :class:`ServedRun`, that interface plus the few reads and controls the REST API offers.

What the server holds is bounded: :class:`RunCache` keeps at most ``capacity`` run handles (least recently
used go first; an evicted run is read again from the store when asked for). A run the server cannot read (a
malformed ``record.json``, a spec this version refuses) never breaks the list: it is left out, logged once,
and named in :attr:`Listing.unreadable`.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Protocol

from nbtrain.client import Run
from nbtrain.errors import RunNotFoundError
from nbtrain.model import Batch
from nbtrain.runjson import DetailedRun, run_detail, run_summary
from nbtrain.store import RunRecord, Store

__all__ = ["DEFAULT_CAPACITY", "Listing", "RunCache", "ServedRun", "run_detail", "run_summary"]

log = logging.getLogger("nbtrain.server")

#: Run handles a server keeps by default (``NbtrainExtension.run_cache_size``).
DEFAULT_CAPACITY = 256


class ServedRun(DetailedRun, Protocol):
    """What the REST API uses of a run (:class:`nbtrain.client.Run` is one): what the detail reads
    (:class:`nbtrain.runjson.DetailedRun`), plus

    - ``sync()``: read what is new (the cache does, so each event is read once per cached run);
    - ``metrics(rank)``: the metrics endpoint;
    - ``cancel()``, ``resume()``: the Stop and Resume actions.
    """

    def sync(self, *, with_lines: bool = False) -> Batch:
        """Read what is new from the backend."""
        ...

    def metrics(self, rank: int = 0) -> dict[str, list[tuple[int, float]]]:
        """Every metric ``rank`` reported so far, in full."""
        ...

    def cancel(self) -> None:
        """End every process of the run."""
        ...

    def resume(self) -> Any:
        """Launch the run again from its latest checkpoint."""
        ...


@dataclass(frozen=True)
class Listing:
    """Every readable run's summary (newest first) and, for each run that could not be read, why."""

    rows: list[dict[str, Any]]
    unreadable: list[dict[str, str]] = field(default_factory=list)  # {"id": ..., "message": ...}


class RunCache:
    """Run handles by id, synced incrementally (each event is read from disk once per cached run).

    At most ``capacity`` handles are kept, least recently used evicted first. A handle is built again when
    the run's record changed on disk (a resume, a verdict or the MLflow link saved by another process): a
    record is saved a few times in a run's life. Safe for the server's executor threads.
    """

    def __init__(self, store: Store, *, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"RunCache capacity must be at least 1, got {capacity}.")
        self.store = store
        self.capacity = capacity
        self._runs: OrderedDict[str, tuple[RunRecord, ServedRun]] = OrderedDict()  # with the record it was built from
        self._lock = threading.Lock()
        self._warned: OrderedDict[str, str] = OrderedDict()  # run id -> the problem last logged for it

    def __len__(self) -> int:
        """How many run handles are held now (at most :attr:`capacity`)."""
        with self._lock:
            return len(self._runs)

    def get(self, run_id: str) -> ServedRun:
        """The handle of ``run_id`` (a unique prefix works); RunNotFoundError when unknown.

        Raises what reading a malformed record raises (ValueError, KeyError, TypeError, SpecError...).
        """
        full = self.store.resolve(run_id)
        record = self.store.load(full)
        if record.run_id != full:
            raise ValueError(f"the record of run {full} names another run ({record.run_id[:80]!r}).")
        with self._lock:
            cached = self._runs.get(full)
            if cached is None or cached[0] != record:
                # new, or its record changed: resumed elsewhere (another attempt), a verdict, the MLflow link
                cached = (record, Run(copy.deepcopy(record), self.store))  # the handle's copy is its own
            self._runs[full] = cached
            self._runs.move_to_end(full)
            while len(self._runs) > self.capacity:
                self._runs.popitem(last=False)
        run = cached[1]
        run.sync()
        return run

    def listing(self) -> Listing:
        """Every run in the store as a summary row, newest first; a run that cannot be read is left out.

        Each unreadable run is logged as a warning once (again only when its problem changes) and named
        with its problem in :attr:`Listing.unreadable`. A run removed while listing is simply gone.
        """
        rows: list[dict[str, Any]] = []
        unreadable: list[dict[str, str]] = []
        for run_id in self._ids():
            try:
                rows.append(run_summary(self.get(run_id)))
            except RunNotFoundError:
                continue
            except Exception as error:  # noqa: BLE001 - one bad run must never break the list of the others
                message = f"run {run_id} cannot be read ({type(error).__name__}: {str(error)[:300]}); it is left out."
                unreadable.append({"id": run_id, "message": message})
                self._warn_once(run_id, message)
        return Listing(rows, unreadable)

    def _ids(self) -> list[str]:
        for _ in range(3):  # a run removed between the store's glob and its stat: list again
            try:
                return self.store.ids()
            except FileNotFoundError:
                continue
        return self.store.ids()

    def _warn_once(self, run_id: str, message: str) -> None:
        with self._lock:
            if self._warned.get(run_id) == message:
                return
            self._warned[run_id] = message
            while len(self._warned) > self.capacity:
                self._warned.popitem(last=False)
        log.warning("nbtrain: %s Fix or remove %s.", message, self.store.run_dir(run_id) / "record.json")
