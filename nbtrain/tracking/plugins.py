"""Tracker plug-ins: nbtrain's own record of a run, sent to other trackers beside MLflow.

A plug-in is a :class:`TrackerPlugin` subclass registered in the ``nbtrain.trackers`` entry-point group::

    [project.entry-points."nbtrain.trackers"]
    team = "team_tracker:TeamTracker"

The run's tracking agent (:mod:`nbtrain.tracking.agent`, beside the run, never on the ranks) drives every
enabled plug-in with the same record MLflow gets, in this order::

    start(RunInfo)                 once per agent: identity, the JobSpec's params, tags; ``resume_id`` is what
                                   ``start`` returned for this run before (another attempt, an agent restarted)
    log_params({name: str})        init_trackers' config / a Trainer's arguments (secret-looking values masked)
    set_tags({name: str})          what the workers ran (versions, device), datasets
    log_metrics([Point])           rank 0's metric points (key, value, timestamp ms, step), in event order
    log_artifact(path, folder)     files the code logged (get_tracker("mlflow").log_artifact / log_figure)
    finish(state, failure)         the verdict: "succeeded" / "failed" / "cancelled", the failure report or None

Which plug-ins run: ``NBTRAIN_TRACKERS`` (comma-separated names; ``none`` for none) when set, else every
installed one whose :meth:`TrackerPlugin.enabled` says so. Each plug-in has its own ledger
(``runs/<id>/tracking-<name>.json``, per event stream the highest sequence number it took), so a plug-in whose
service is down is retried from where it stopped and never holds MLflow back, and an agent that restarts sends
nothing twice. A failing plug-in becomes a notice (once per kind of failure), never a failed run.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from nbtrain.events import Event, EventKind
from nbtrain.model import Batch
from nbtrain.store import write_json_atomic
from nbtrain.tracking.ledger import Point, stream_key
from nbtrain.tracking.userfiles import user_file

if TYPE_CHECKING:
    from nbtrain.reader import TrackedRun

__all__ = ["ENTRY_POINT_GROUP", "ENV_TRACKERS", "PluginForwarder", "RunInfo", "TrackerPlugin", "enabled_plugins"]

ENTRY_POINT_GROUP = "nbtrain.trackers"
ENV_TRACKERS = "NBTRAIN_TRACKERS"


@dataclass(frozen=True)
class RunInfo:
    """Who the run is, for :meth:`TrackerPlugin.start`."""

    run_id: str  # nbtrain's run id (stable across attempts and resumes)
    name: str  # the run's name (--name)
    experiment: str  # as MLflow's: --experiment, else the notebook's name, else "nbtrain"
    created: float  # seconds since the epoch
    params: dict[str, str] = field(default_factory=dict)  # the JobSpec and the cell's literals
    tags: dict[str, str] = field(default_factory=dict)  # identity, source, versions, gang shape
    resume_id: str | None = None  # what start() returned for this run before, if anything


class TrackerPlugin(ABC):
    """One external tracker (see the module docstring for the call order). Methods run on the agent's thread
    and may raise: the agent retries the same events later."""

    #: the plug-in's name (its entry point's name is used when they differ)
    name: ClassVar[str] = ""

    @classmethod
    def enabled(cls) -> bool:
        """Whether to run when ``NBTRAIN_TRACKERS`` is not set (default: yes, installing it is opting in)."""
        return True

    @abstractmethod
    def start(self, run: RunInfo) -> str:
        """Open (or, with ``run.resume_id``, reopen) this run in the tracker; return its id there."""

    def log_params(self, params: Mapping[str, str]) -> None:
        """Hyperparameters (strings); a later call may repeat a key with the same value. Default: dropped."""
        return

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Descriptive key/value tags. Default: dropped."""
        return

    @abstractmethod
    def log_metrics(self, points: Sequence[Point]) -> None:
        """Metric points, oldest first; a restarted attempt may report steps again (a later value wins)."""

    def log_artifact(self, path: Path, artifact_path: str | None) -> None:
        """A file to keep with the run, under the folder ``artifact_path`` (None: the top). Default: dropped."""
        return

    @abstractmethod
    def finish(self, state: str, failure: Mapping[str, Any] | None) -> None:
        """The run's verdict; a resumed run calls :meth:`start` (with ``resume_id``) and this again later."""


@cache
def _entry_points() -> dict[str, Any]:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def enabled_plugins(environ: Mapping[str, str] | None = None) -> dict[str, type[TrackerPlugin]]:
    """The plug-in classes to run, by name (see the module docstring); an unknown name in ``NBTRAIN_TRACKERS``
    is a ValueError naming the installed ones."""
    env = os.environ if environ is None else environ
    points = _entry_points()
    chosen = env.get(ENV_TRACKERS)
    if chosen is not None:
        names = [n.strip() for n in chosen.split(",") if n.strip() and n.strip().lower() != "none"]
        unknown = [n for n in names if n not in points]
        if unknown:
            raise ValueError(f"{ENV_TRACKERS}={chosen!r}: no tracker plug-in named {', '.join(unknown)} is installed "
                             f"(installed: {', '.join(sorted(points)) or 'none'}); install the package that "
                             f"registers it in the entry-point group {ENTRY_POINT_GROUP!r}, or drop the name")
        return {n: points[n].load() for n in names}
    out: dict[str, type[TrackerPlugin]] = {}
    for name, point in sorted(points.items()):
        try:
            cls = point.load()
        except Exception:  # noqa: BLE001 - a broken optional plug-in (its package missing) is skipped
            continue
        if cls.enabled():
            out[name] = cls
    return out


class PluginForwarder:
    """Drives one plug-in from the run's events, exactly once per event (its own ledger), on the caller's thread.

    ``on_batch`` is a :meth:`~nbtrain.client.Run.subscribe` listener: the first call reads the run from its start
    (the ledger skips what was sent), later calls take the batch. Never raises: a failure is kept in ``error``,
    and the events come back by a fresh read at the next call after ``RETRY_S``.
    """

    RETRY_S = 5.0

    def __init__(self, run: TrackedRun, name: str, plugin: TrackerPlugin, *, experiment: str) -> None:
        self.run, self.name, self.plugin, self.experiment = run, name, plugin, experiment
        self.error: str | None = None
        self._path = run.run_dir() / f"tracking-{name}.json"
        self._state = _load(self._path)
        self._started = False
        self._catch_up = True
        self._retry_at = 0.0

    def on_batch(self, batch: Batch) -> None:
        """Send what is new; finish once the run is terminal (see the class docstring)."""
        if time.monotonic() < self._retry_at:
            self._catch_up = True
            return
        try:
            self._start()
            events = self._read_all() if self._catch_up else list(batch.events)
            self._catch_up = False
            self._send(e for e in events if e.rank in (0, None))
            snap = self.run.snapshot(refresh=False)
            done = self._state.get("finished")
            if snap.state.terminal and done != [snap.attempt, snap.state.value]:
                self.plugin.finish(snap.state.value, snap.failure.to_dict() if snap.failure else None)
                self._state["finished"] = [snap.attempt, snap.state.value]
                self._save()
            self.error = None
        except Exception as error:  # noqa: BLE001 - a plug-in's failure must never stop the run or MLflow
            self._retry_at = time.monotonic() + self.RETRY_S
            self._catch_up = True
            self._state = _load(self._path)  # the marks of what was surely sent; the rest is read again
            message = f"tracker plug-in {self.name!r} failed ({type(error).__name__}: {str(error)[:300]}); retrying"
            if message != self.error:
                self.error = message
                self.run.notice(message)

    def _start(self) -> None:
        if self._started:
            return
        from nbtrain.tracking.artifacts import new_run_params, new_run_tags
        from nbtrain.tracking.describe import experiment_name

        facts = self.run.facts()
        info = RunInfo(run_id=facts.run_id, name=self.run.spec.name or facts.run_id,
                       experiment=self.experiment or experiment_name(self.run.spec, facts.submitted_from),
                       created=facts.created, params=new_run_params(self.run), tags=new_run_tags(self.run),
                       resume_id=self._state.get("id"))
        self._state["id"] = self.plugin.start(info)
        self._save()
        self._started = True

    def _read_all(self) -> list[Event]:
        cursor, out = self.run.cursor(), list[Event]()
        for _ in range(100_000):
            batch = cursor.poll(max_lines=0)
            if not batch.events:
                break
            out.extend(batch.events)
        return out

    def _send(self, events: Any) -> None:
        from nbtrain.tracking.describe import config_params, dataset_tags, mlflow_key, worker_tags

        hwm: dict[str, int] = self._state.setdefault("hwm", {})
        points: list[Point] = []
        for event in events:
            key = stream_key(event)
            if event.seq <= hwm.get(key, 0):
                continue
            if event.kind is EventKind.METRIC and event.rank == 0:
                stamp, step = int(event.time * 1000), int(event.data.get("step") or 0)
                points += [Point(mlflow_key(k), float(v), stamp, step) for k, v in (event.data.get("values") or {}).items()]
            else:
                self._flush(points)
                if event.kind is EventKind.PARAMS and event.rank == 0:
                    self.plugin.log_params(config_params(event.data.get("values") or {}))
                elif event.kind is EventKind.ENV and event.rank == 0:
                    self.plugin.set_tags(worker_tags(event.data))
                elif event.kind is EventKind.DATASET and event.rank == 0:
                    self.plugin.set_tags(dataset_tags(event.data))
                elif (file := user_file(event, self.run.run_dir())) is not None:
                    _send_file(self.plugin, file)
            hwm[key] = event.seq
            if not points:
                self._save()
        self._flush(points)
        self._save()

    def _flush(self, points: list[Point]) -> None:
        if points:
            self.plugin.log_metrics(list(points))
            points.clear()

    def _save(self) -> None:
        write_json_atomic(self._path, self._state)


def _send_file(plugin: TrackerPlugin, file: Any) -> None:
    if file.path is not None:
        if file.path.is_file():
            plugin.log_artifact(file.path, file.artifact_path)
        return
    import tempfile

    with tempfile.TemporaryDirectory(prefix="nbtrain-artifact-") as tmp:
        local = Path(tmp) / file.name
        local.write_bytes(file.data or b"")
        plugin.log_artifact(local, file.artifact_path)


def _load(path: Path) -> dict[str, Any]:
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
