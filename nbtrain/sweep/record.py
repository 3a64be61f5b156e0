"""The sweep's record in the store: ``<store>/sweeps/<sweep id>/`` (private, like a run's directory).

Layout::

    sweeps/<sweep id>/
        sweep.json        SweepRecord (replaced atomically): the spec, every trial's params, job spec, run id,
                          state and early-stop reason, the MLflow parent run, the best trial
        supervisor.lock   held by the sweep supervisor while it lives (nbtrain.filelock)
        supervisor.log    the supervisor's own output (appended)
        cancel            present once someone asked to cancel the sweep (``Sweep.cancel``); its text says who

One writer per file: the supervisor (:mod:`nbtrain.sweep.supervisor`) writes sweep.json (the submitter writes its
first version before starting it); ``Sweep.cancel`` writes ``cancel``, which the supervisor only reads.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from nbtrain.errors import RunNotFoundError, StoreFileError
from nbtrain.spec import JobSpec, slugify
from nbtrain.store import Store, private_dir, read_json, write_json_atomic
from nbtrain.sweep.space import SweepSpec

__all__ = ["CANCEL_NAME", "LOCK_NAME", "LOG_NAME", "SweepRecord", "SweepState", "TrialEntry", "TrialState", "load_sweep",
           "new_sweep_id", "save_sweep", "sweep_dir", "sweep_ids"]

LOCK_NAME, LOG_NAME, CANCEL_NAME = "supervisor.lock", "supervisor.log", "cancel"


class TrialState(Enum):
    """A trial: WAITING for its turn, then its run's state; STOPPED: cancelled early by the sweep."""

    WAITING = "waiting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    STOPPED = "stopped"

    @property
    def ended(self) -> bool:
        """True once the trial will change no more."""
        return self not in (TrialState.WAITING, TrialState.RUNNING)


class SweepState(Enum):
    """The sweep: RUNNING while its supervisor schedules trials, DONE when every trial ended, CANCELLED when it was
    cancelled (``Sweep.cancel``), FAILED when the supervisor could not go on (``error`` says why)."""

    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"


@dataclass
class TrialEntry:
    """One trial: its ``params`` (NAME -> TEXT), the JobSpec it runs with, and once submitted its run."""

    index: int
    params: dict[str, str]
    spec: JobSpec
    run_id: str | None = None
    state: TrialState = TrialState.WAITING
    stopped: str | None = None  # why the sweep stopped it early
    submitted: float | None = None
    ended: float | None = None
    objective: float | None = None  # the last value it reported
    mlflow_run_id: str | None = None  # its MLflow run, once tagged as the parent's child

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {**self.__dict__, "spec": self.spec.to_dict(), "state": self.state.value}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialEntry:
        """Inverse of :meth:`to_dict`."""
        values = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        values.update(spec=JobSpec.from_dict(data["spec"]), state=TrialState(data["state"]))
        return cls(**values)


@dataclass
class SweepRecord:
    """What the store keeps of one sweep (module docstring)."""

    sweep_id: str
    spec: SweepSpec
    bundle_digest: str
    trials: list[TrialEntry]
    created: float = field(default_factory=time.time)
    kind: str = "cell"
    notebook: dict[str, Any] = field(default_factory=dict)
    profile: str | None = None
    state: SweepState = SweepState.RUNNING
    error: str | None = None
    ended: float | None = None
    best: int | None = None  # the index of the best trial
    mlflow_parent: str | None = None
    mlflow_uri: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form for sweep.json."""
        return {**self.__dict__, "spec": self.spec.to_dict(), "trials": [t.to_dict() for t in self.trials],
                "state": self.state.value}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SweepRecord:
        """Inverse of :meth:`to_dict`; tolerates fields added by newer versions."""
        values = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        values.update(spec=SweepSpec.from_dict(data["spec"]), trials=[TrialEntry.from_dict(t) for t in data["trials"]],
                      state=SweepState(data["state"]))
        return cls(**values)


def sweep_dir(store: Store, sweep_id: str) -> Path:
    """The directory of ``sweep_id`` in ``store``."""
    return store.root / "sweeps" / sweep_id


def new_sweep_id(store: Store, name: str) -> str:
    """A fresh sweep id such as ``digits-sweep-3fa9c2`` (its directory reserved on return)."""
    store.ensure_writable()
    private_dir(store.root / "sweeps")
    while True:
        sweep_id = f"{slugify(name)[:32]}-sweep-{secrets.token_hex(3)}"
        try:
            sweep_dir(store, sweep_id).mkdir(mode=0o700)
            return sweep_id
        except FileExistsError:
            continue


def save_sweep(store: Store, record: SweepRecord) -> None:
    """Write ``record`` (atomically)."""
    write_json_atomic(sweep_dir(store, record.sweep_id) / "sweep.json", record.to_dict())


def sweep_ids(store: Store) -> list[str]:
    """Every sweep id with a record, newest first."""
    root = store.root / "sweeps"
    found = [(p.stat().st_mtime, p.parent.name) for p in root.glob("*/sweep.json")] if root.is_dir() else []
    return [sweep_id for _, sweep_id in sorted(found, reverse=True)]


def load_sweep(store: Store, sweep_id: str) -> SweepRecord:
    """The record of ``sweep_id`` (a unique prefix is enough); RunNotFoundError naming the known sweeps."""
    known = sweep_ids(store)
    matches = [s for s in known if s == sweep_id] or [s for s in known if s.startswith(sweep_id)]
    if len(matches) != 1:
        listed = ", ".join(matches if matches else known[:5]) or "none yet"
        what = "matches several sweeps" if matches else "is no sweep in the store"
        raise RunNotFoundError(f"{sweep_id!r} {what} at {store.root}; sweeps: {listed}.")
    path = sweep_dir(store, matches[0]) / "sweep.json"
    data = read_json(path)
    try:
        return SweepRecord.from_dict(data)
    except (KeyError, TypeError, ValueError) as error:
        raise StoreFileError(f"sweep {matches[0]}: {path} is not a sweep record nbtrain can read ({error!r}); "
                             "restore the file, or move the sweep's directory out of the store.") from None
