"""Read a run store into :class:`~nbtrain.stats.model.RunFacts` (the I/O edge of ``nbtrain stats``).

What is read per run: ``record.json`` (spec, kind of each recorded attempt and when it was submitted, the final
state), each attempt's ``status.json`` (state, started, ended: written by the supervisor or the Kubernetes
mirror) and, from each rank's event file, only the lines of ``rank_start`` and ``checkpoint`` events (other
lines are skipped before they are parsed). Nothing is written.
"""

from __future__ import annotations

import json
import os
import pwd
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from nbtrain.events import EventKind, parse_line
from nbtrain.model import is_terminal
from nbtrain.spec import Device, slugify
from nbtrain.stats.compute import compute_stats
from nbtrain.stats.model import AttemptFacts, AttemptKind, RunFacts, Stats
from nbtrain.store import RunRecord, Store

__all__ = ["configured_tracking_uri", "from_mlflow", "gather", "job_of", "read_store", "store_owner"]

_WANTED = (f'"{EventKind.RANK_START.value}"', f'"{EventKind.CHECKPOINT.value}"')


def store_owner(root: Path) -> str:
    """The name of the user who owns the store directory ``root`` (the store is private to its user)."""
    uid = root.stat().st_uid if root.exists() else os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid{uid}"


def job_of(record: RunRecord) -> str:
    """What "the same job" is for recovery times: ``NOTEBOOK#CELL-ID`` for a notebook cell whose id is known,
    else the run's name as its run id spells it (``slugify(name)[:40]``: what a run id from MLflow tells)."""
    path, cell = record.notebook.get("path"), record.notebook.get("cell_id")
    return f"{path}#{cell}" if path and cell else slugify(record.spec.name)[:40]


def read_store(store: Store, user: str | None = None) -> list[RunFacts]:
    """Every readable run of ``store`` as RunFacts of ``user`` (default: the store directory's owner).

    Records that fail to parse are skipped (as ``Store.records`` does), and so are the runs ``nbtrain validate``
    starts (its rungs' runs are checks of a job, not the team's work: they would count as failures and recoveries).
    """
    who = user or store_owner(store.root)
    return [_run_facts(store, record, who) for record in store.records() if not is_validation(record)]


def is_validation(record: RunRecord) -> bool:
    """Whether ``record`` is a run of ``nbtrain validate``'s ladder (it marks them ``notebook.validate=RUNG``)."""
    return bool((record.notebook or {}).get("validate"))


def _run_facts(store: Store, record: RunRecord, user: str) -> RunFacts:
    spec = record.spec
    attempts = tuple(_attempts(store, record))
    return RunFacts(
        run_id=record.run_id, user=user, job=job_of(record), backend=record.backend, created=record.created,
        nodes=spec.nodes, procs=spec.procs_per_node, gpu=spec.device is Device.GPU,
        state=attempts[-1].state if attempts else record.state,  # the record's state may predate the verdict
        attempts=attempts, profile=record.profile,  # "NAME VERSION" of its --profile (records keep it)
        profile_recorded=True,
    )


def _attempts(store: Store, record: RunRecord) -> Iterable[AttemptFacts]:
    entries = {int(a.get("attempt", 0)): a for a in record.attempts}
    on_disk = set()
    attempts_dir = store.run_dir(record.run_id) / "attempts"
    if attempts_dir.is_dir():
        on_disk = {int(p.name) for p in attempts_dir.iterdir() if p.name.isdigit()}
    numbers = sorted(set(entries) | on_disk)
    checkpoint_seen = False
    for number in numbers:
        entry = entries.get(number)
        directory = store.attempt_dir(record.run_id, number)
        status = _read_json(directory / "status.json") or {}
        state = str(status.get("state") or "")
        ended = status.get("ended")
        if number == numbers[-1] and (not state or is_terminal(record.state)):
            # the record keeps the verdict the notebook saw last (a supervisor that died leaves no status)
            state, ended = record.state, ended if ended is not None else record.ended
        started_all, has_checkpoint = _scan_events(directory / "events", record.spec.world_size)
        submitted = entry.get("submitted") if entry else None
        yield AttemptFacts(
            number=number, kind=_kind(number, entry), state=state or "pending",
            submitted=float(submitted) if submitted is not None else None,
            all_ranks_started=started_all, started=_float(status.get("started")), ended=_float(ended),
            checkpoint_before=checkpoint_seen,
        )
        checkpoint_seen = checkpoint_seen or has_checkpoint


def _kind(number: int, entry: dict[str, Any] | None) -> AttemptKind:
    if number == 0:
        return AttemptKind.SUBMIT
    if entry is None:
        return AttemptKind.RESTART  # automatic restarts are planned by the supervisor, not recorded by the client
    try:
        return AttemptKind(str(entry.get("kind") or "resume"))
    except ValueError:
        return AttemptKind.OTHER


def _scan_events(events: Path, world_size: int) -> tuple[float | None, bool]:
    """(the latest of the ranks' first rank_start times when every rank has one, a checkpoint event exists)."""
    first_start: dict[int, float] = {}
    checkpoint = False
    for rank in range(world_size):
        try:
            handle = open(events / f"rank-{rank}.jsonl", encoding="utf-8", errors="replace")
        except OSError:
            continue
        with handle:
            for line in handle:
                if not any(word in line for word in _WANTED):
                    continue
                event = parse_line(line)
                if event is None:
                    continue
                if event.kind is EventKind.RANK_START and rank not in first_start:
                    first_start[rank] = event.time
                elif event.kind is EventKind.CHECKPOINT:
                    checkpoint = True
    all_started = max(first_start.values()) if world_size and len(first_start) == world_size else None
    return all_started, checkpoint


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _float(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def configured_tracking_uri(given: str | None = None) -> str | None:
    """The MLflow to read pruned runs from: ``given`` (``none``: no MLflow), else ``$MLFLOW_TRACKING_URI``, else
    None. Only an explicitly configured MLflow is read (not MLflow's default ./mlflow.db of the current directory)."""
    value = (given if given is not None else os.environ.get("MLFLOW_TRACKING_URI", "")).strip()
    return None if value.lower() in ("", "none") else value


def gather(stores: Sequence[Store], now: float, since: float | None, *, tracking_uri: str | None = None
           ) -> tuple[Stats, list[tuple[str, str]]]:
    """The statistics of the runs of ``stores`` together (each store's runs are its owner's), and the
    (where, user) pairs they were read from. What ``nbtrain stats`` and ``GET /nbtrain/stats`` both call.

    With ``tracking_uri``, the nbtrain runs MLflow has there that no store has (pruned, or run from another
    machine) are added, for the stores' users only (MLflow's ``mlflow.user`` tag): see :func:`from_mlflow`.
    """
    facts: list[RunFacts] = []
    sources = []
    for store in stores:
        user = store_owner(store.root)
        facts += read_store(store, user)
        sources.append((str(store.root), user))
    if tracking_uri:
        from nbtrain.secrets import redact_url
        from nbtrain.tracking.history import nbtrain_runs

        users = {user for _, user in sources}
        try:
            rows = list(nbtrain_runs(tracking_uri))
        except Exception as error:  # MLflow raises many kinds: say which URI failed and why
            raise ValueError(f"could not read nbtrain runs from MLflow at {redact_url(tracking_uri)} "
                             f"({type(error).__name__}: {str(error)[:200]}); check the tracking URI, or leave "
                             "MLflow out (--tracking-uri none).") from error
        extra = from_mlflow(rows, {f.run_id for f in facts}, users)
        facts += extra
        sources.append((f"mlflow:{redact_url(tracking_uri)}", ",".join(sorted(users))))
    return compute_stats(facts, now, since), sources


def from_mlflow(rows: Iterable[dict[str, Any]], known: set[str], users: set[str]) -> list[RunFacts]:
    """RunFacts of the MLflow rows (``nbtrain.tracking.history.nbtrain_runs``) whose run is not in ``known`` and
    whose ``mlflow.user`` is one of ``users`` (rows without a user are left out: they may be anyone's). Each
    becomes one attempt from MLflow's start to its end; no submit time, ranks' start or checkpoint is known."""
    out = []
    for row in rows:
        if row["run_id"] in known or row.get("user") not in users or row.get("start") is None:
            continue
        path, cell = row.get("notebook"), row.get("cell_id")
        job = f"{path}#{cell}" if path and cell else str(row["run_id"]).rsplit("-", 1)[0]
        attempt = AttemptFacts(number=0, kind=AttemptKind.SUBMIT, state=row["state"], started=row["start"],
                               ended=row.get("end") if row["state"] != "running" else None)
        out.append(RunFacts(run_id=row["run_id"], user=row["user"], job=job, backend=row.get("backend") or "unknown",
                            created=row["start"], nodes=row["nodes"], procs=row["procs"], gpu=False,
                            state=row["state"], attempts=(attempt,)))
        known = known | {row["run_id"]}
    return out
