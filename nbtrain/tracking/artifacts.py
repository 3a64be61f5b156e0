"""What the forwarder reads from the store for MLflow: the bundle's facts at creation, files at the end.

What it uses of the run is :class:`nbtrain.reader.TrackedRun`: the record's facts, and the bundle directory
and the attempts' log files where the store keeps them (``bundle_dir()``, ``log_file()``), uploaded as they are.

No mlflow import here: uploads go through :class:`~nbtrain.tracking.sink.MlflowSink`.
"""

from __future__ import annotations

import getpass
import json
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbtrain.model import RunState
from nbtrain.tracking.describe import (
    failure_text,
    git_commit,
    literal_params,
    parameter_overrides,
    run_tags,
    spec_params,
)

if TYPE_CHECKING:
    from nbtrain.reader import TrackedRun
    from nbtrain.tracking.sink import MlflowSink

__all__ = ["new_run_params", "new_run_tags", "read_bundle", "upload_artifacts"]


def read_bundle(run: TrackedRun) -> tuple[dict[str, Any] | None, str]:
    """The run's bundle manifest (None if unreadable) and main.py text ("" if unreadable)."""
    directory = run.bundle_dir()
    try:
        manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        manifest = None
    try:
        main = (directory / "main.py").read_text(encoding="utf-8")
    except OSError:
        main = ""
    return (manifest if isinstance(manifest, dict) else None), main


def new_run_tags(run: TrackedRun) -> dict[str, str]:
    """Tags of the MLflow run being created (runs ``git`` once, bounded)."""
    facts = run.facts()
    manifest, _ = read_bundle(run)
    try:
        user: str | None = getpass.getuser()
    except (KeyError, OSError):
        user = None
    return run_tags(run_id=facts.run_id, spec=run.spec, backend=facts.backend, bundle_digest=facts.bundle_digest,
                    notebook=facts.submitted_from, manifest=manifest, commit=git_commit(facts.submitted_from), user=user)


def new_run_params(run: TrackedRun) -> dict[str, str]:
    """The JobSpec and the cell's captured literals as params (a job parameter: the value it runs with)."""
    manifest, main = read_bundle(run)
    names = [str(c.get("name")) for c in (manifest or {}).get("captured") or () if c.get("kind") == "literal"]
    literals = literal_params(main, names) if names and main else {}
    return {**spec_params(run.spec), **literals, **parameter_overrides(manifest, run.spec.env)}


def upload_artifacts(
    sink: MlflowSink,
    mlflow_run: str,
    run: TrackedRun,
    *,
    known_attempts: Iterable[int],
    attempt: int,
    state: RunState,
    failure: dict[str, Any] | None,
    attempt_failures: dict[int, dict[str, Any]],
    uploaded: dict[str, list[Any]],
    progress: Callable[[], None],
) -> None:
    """Upload what a run that ended (its latest ``attempt``) leaves behind, each piece once.

    - ``bundle/`` (a later attempt with another bundle: ``bundle-<digest12>/``);
    - ``logs/attempt-<n>/rank-<r>.log`` for every rank of every attempt up to ``attempt``;
    - ``failures/attempt-<n>.{json,txt}`` for each attempt that failed;
    - ``failure.json``/``failure.txt`` at the top when the run ended FAILED.

    ``uploaded`` (the ledger's) records what went; ``progress()`` persists it after each piece, so a
    forwarder that takes over after a crash does not upload it again.
    """
    digest = run.facts().bundle_digest
    if digest not in uploaded["bundles"]:
        directory = run.bundle_dir()
        if directory.is_dir():
            sink.upload(mlflow_run, directory, "bundle" if not uploaded["bundles"] else f"bundle-{digest[:12]}")
        uploaded["bundles"].append(digest)
        progress()
    with tempfile.TemporaryDirectory(prefix="nbtrain-mlflow-") as tmp:
        for number in sorted(a for a in set(known_attempts) if a <= attempt and a not in uploaded["logs"]):
            for rank in range(run.spec.world_size):
                _upload_log(sink, mlflow_run, run, Path(tmp), number, rank)
            uploaded["logs"].append(number)
            progress()
        reports = Path(tmp) / "failures"
        reports.mkdir()
        for number, report in sorted(attempt_failures.items()):
            if number in uploaded["failures"] or number > attempt:
                continue
            _write_failure(reports, f"attempt-{number}", report)
            sink.upload(mlflow_run, reports / f"attempt-{number}.json", "failures")
            sink.upload(mlflow_run, reports / f"attempt-{number}.txt", "failures")
            uploaded["failures"].append(number)
            progress()
        if state is RunState.FAILED and failure is not None:
            final = Path(tmp) / "final"
            final.mkdir()
            _write_failure(final, "failure", failure)
            sink.upload(mlflow_run, final)


def _upload_log(sink: MlflowSink, mlflow_run: str, run: TrackedRun, tmp: Path, attempt: int, rank: int) -> None:
    local = run.log_file(rank, attempt)
    if not local.is_file():  # backends without a shared disk serve logs through their API
        text = run.logs(rank, attempt=attempt)
        if not text:
            return
        local = tmp / f"attempt-{attempt}" / f"rank-{rank}.log"
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(text + "\n", encoding="utf-8")
    sink.upload(mlflow_run, local, f"logs/attempt-{attempt}")


def _write_failure(directory: Path, stem: str, failure: dict[str, Any]) -> None:
    (directory / f"{stem}.json").write_text(json.dumps(failure, indent=2, default=str) + "\n", encoding="utf-8")
    (directory / f"{stem}.txt").write_text(failure_text(failure), encoding="utf-8")
