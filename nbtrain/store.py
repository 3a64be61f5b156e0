"""Run records on disk: the source of truth for runs, ``attach`` and resume.

Layout under the store root (``$NBTRAIN_HOME``, default ``~/.nbtrain``)::

    bundles/<digest>/                 content-addressed bundles (shared by runs)
    runs/<run-id>/record.json         the RunRecord (written by the notebook side only)
    runs/<run-id>/attempts/<n>/       one launch of the gang:
        plan.json                     what the supervisor executes
        status.json                   the supervisor's verdict (written by the supervisor only)
        events/<source>.jsonl         append-only event streams
        logs/rank-<r>.log             every line of global rank r; logs/node-<i>.log the launcher's own
        result.pkl                    rank 0's result

Every JSON file is replaced atomically (write to a temp file, fsync, rename), so readers never see a
half-written record and a crash loses at most the last update.
"""

from __future__ import annotations

import difflib
import json
import os
import secrets
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbtrain.errors import EnvironmentProblem, RunNotFoundError
from nbtrain.spec import JobSpec, slugify

__all__ = ["RECORD_SCHEMA", "RunRecord", "Store", "default_home", "write_json_atomic"]

RECORD_SCHEMA = 1


def default_home() -> Path:
    """``$NBTRAIN_HOME`` or ``~/.nbtrain``."""
    env = os.environ.get("NBTRAIN_HOME")
    return Path(env).expanduser() if env else Path.home() / ".nbtrain"


def write_json_atomic(path: Path, data: Any) -> None:
    """Replace ``path`` with ``data`` as JSON, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, sort_keys=True, default=str)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path) -> Any:
    """Parse a JSON file written by :func:`write_json_atomic`."""
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


@dataclass
class RunRecord:
    """What the store keeps per run. ``state``/``failure`` are the last verdict the notebook saw."""

    run_id: str
    spec: JobSpec
    bundle_digest: str
    backend: str
    handle: dict[str, Any] = field(default_factory=dict)
    created: float = field(default_factory=time.time)
    kind: str = "cell"
    notebook: dict[str, Any] = field(default_factory=dict)
    tracking_run_id: str | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    state: str = "pending"
    failure: dict[str, Any] | None = None
    ended: float | None = None
    schema: int = RECORD_SCHEMA

    def to_dict(self) -> dict[str, Any]:
        """JSON form for record.json."""
        data = dict(self.__dict__)
        data["spec"] = self.spec.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunRecord:
        """Inverse of :meth:`to_dict`; tolerates fields added by newer versions."""
        known = set(cls.__dataclass_fields__)
        values = {k: v for k, v in data.items() if k in known}
        values["spec"] = JobSpec.from_dict(data["spec"])
        return cls(**values)


class Store:
    """Run records and bundles under one root directory. Safe for several processes."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_home()

    @property
    def bundles(self) -> Path:
        """Directory of content-addressed bundles."""
        return self.root / "bundles"

    def run_dir(self, run_id: str) -> Path:
        """Directory of one run (may not exist)."""
        return self.root / "runs" / run_id

    def attempt_dir(self, run_id: str, attempt: int) -> Path:
        """Directory of one attempt of one run."""
        return self.run_dir(run_id) / "attempts" / str(attempt)

    def ensure_writable(self) -> None:
        """Create the root if needed; EnvironmentProblem naming the path when it is not writable."""
        try:
            (self.root / "runs").mkdir(parents=True, exist_ok=True)
            probe = self.root / f".probe-{os.getpid()}"
            probe.write_text("ok")
            probe.unlink()
        except OSError as error:
            raise EnvironmentProblem(
                f"the nbtrain store at {self.root} is not writable ({error.strerror}); "
                "set NBTRAIN_HOME to a writable directory."
            ) from error

    def new_run_id(self, name: str) -> str:
        """A fresh, unique, DNS-1123-safe id such as ``digits-3fa9c2`` (directory reserved on return)."""
        self.ensure_writable()
        for _ in range(100):
            run_id = f"{slugify(name)[:40]}-{secrets.token_hex(3)}"
            try:
                self.run_dir(run_id).mkdir(parents=True)
                return run_id
            except FileExistsError:
                continue
        raise EnvironmentProblem(f"could not allocate a run id under {self.root}/runs; the store may be full.")

    def save(self, record: RunRecord) -> None:
        """Write ``record`` (atomically)."""
        write_json_atomic(self.run_dir(record.run_id) / "record.json", record.to_dict())

    def load(self, run_id: str) -> RunRecord:
        """The record of ``run_id``; RunNotFoundError listing close matches when absent."""
        path = self.run_dir(run_id) / "record.json"
        if not path.exists():
            known = self.ids()
            close = [r for r in known if r.startswith(run_id) or run_id in r]
            close += [r for r in difflib.get_close_matches(run_id, known, n=5, cutoff=0.6) if r not in close]
            close = close[:5]
            hint = f" Did you mean: {', '.join(close)}?" if close else " List runs with nbtrain.runs() or `%nbtrain runs`."
            raise RunNotFoundError(f"no run {run_id!r} in the store at {self.root}.{hint}")
        return RunRecord.from_dict(read_json(path))

    def resolve(self, run_id: str) -> str:
        """Expand a unique prefix of a run id into the full id."""
        if (self.run_dir(run_id) / "record.json").exists():
            return run_id
        matches = [r for r in self.ids() if r.startswith(run_id)]
        if len(matches) == 1:
            return matches[0]
        self.load(run_id)  # raises with suggestions
        return run_id

    def ids(self) -> list[str]:
        """Every run id with a record, newest first."""
        runs = self.root / "runs"
        if not runs.is_dir():
            return []
        found = [(p.stat().st_mtime, p.parent.name) for p in runs.glob("*/record.json")]
        return [run_id for _, run_id in sorted(found, reverse=True)]

    def records(self) -> list[RunRecord]:
        """Every readable record, newest first (records that fail to parse are skipped)."""
        out = []
        for run_id in self.ids():
            try:
                out.append(self.load(run_id))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return sorted(out, key=lambda r: r.created, reverse=True)
