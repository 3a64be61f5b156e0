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

The store is private to its user, whatever the umask: the root and every directory in it are 0700, every
file 0600 (bundles carry pickled notebook data, logs and results what the ranks printed and returned). A root
found wider is tightened once, with a warning. The local supervisor and the ranks run as the same user with
umask 077, so what they write (logs, events, result.pkl, checkpoints in the run directory) is private too.
"""

from __future__ import annotations

import difflib
import json
import os
import secrets
import tempfile
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbtrain.errors import EnvironmentProblem, RunNotFoundError, StoreFileError
from nbtrain.private import PRIVATE_DIR, PRIVATE_FILE, PRIVATE_UMASK, private_dir
from nbtrain.spec import JobSpec, slugify

__all__ = [
    "PRIVATE_DIR", "PRIVATE_FILE", "PRIVATE_UMASK", "RECORD_SCHEMA", "RunRecord", "Store", "default_home",
    "private_dir", "write_json_atomic",
]

RECORD_SCHEMA = 1


def default_home() -> Path:
    """``$NBTRAIN_HOME`` or ``~/.nbtrain``."""
    env = os.environ.get("NBTRAIN_HOME")
    return Path(env).expanduser() if env else Path.home() / ".nbtrain"


def write_json_atomic(path: Path, data: Any) -> None:
    """Replace ``path`` with ``data`` as JSON, atomically (a 0600 file; missing directories are made 0700)."""
    private_dir(path.parent)
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
    """Parse a JSON file written by :func:`write_json_atomic`; StoreFileError (a ValueError) naming the file when it
    is not JSON (truncated, edited)."""
    with open(path, encoding="utf-8") as handle:
        try:
            return json.load(handle)
        except ValueError as error:  # JSONDecodeError, or bytes that are not UTF-8
            raise StoreFileError(f"{path}: not valid JSON ({error}); the file is damaged (truncated or edited). "
                                 "Restore it, or move its run directory out of the store.") from None


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
    profile: str | None = None  # "NAME VERSION" of the --profile the run started from (None: none)
    cancel_reason: str | None = None  # who cancelled the run and why, when they said (a sweep's early stop)
    schema: int = RECORD_SCHEMA

    @property
    def latest_attempt(self) -> int:
        """The number of the run's latest attempt: the highest that ``attempts`` lists or ``handle`` names (its
        handle lands after its entry; a record from before ``attempts`` has only the handle); 0 when neither says."""
        return max([int(a.get("attempt", 0)) for a in self.attempts] + [int(self.handle.get("attempt", 0))])

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
        """Create the root (0700) if needed, tighten it if it is wider (warning once); EnvironmentProblem naming
        the path when it is not writable."""
        try:
            existed = self.root.is_dir()
            private_dir(self.root / "runs")
            if existed:
                self._make_private()
            probe = self.root / f".probe-{os.getpid()}"
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE))
            probe.unlink()
        except OSError as error:
            raise EnvironmentProblem(
                f"the nbtrain store at {self.root} is not writable ({error.strerror}); "
                "set NBTRAIN_HOME to a writable directory."
            ) from error

    def _make_private(self) -> None:
        """Tighten a root that others may read (made by an older nbtrain, or by hand) to 0700, with a warning."""
        mode = self.root.stat().st_mode & 0o777
        if not mode & 0o077:
            return
        try:
            for directory in (self.root, self.root / "runs", self.bundles):
                if directory.is_dir():
                    directory.chmod(directory.stat().st_mode & 0o700)
        except OSError as error:
            warnings.warn(
                f"the nbtrain store at {self.root} is readable by other users (mode {mode:04o}) and could not be "
                f"made private ({error.strerror}): other accounts may read its pickled notebook data, logs and "
                "results. chmod 700 it, or set NBTRAIN_HOME to a directory of your own.",
                UserWarning, stacklevel=3,
            )
            return
        warnings.warn(
            f"the nbtrain store at {self.root} was readable by other users (mode {mode:04o}); nbtrain made it "
            "private (0700): it holds pickled notebook data, logs and results. To share runs, export them "
            "(%nbtrain export) instead.",
            UserWarning, stacklevel=3,
        )

    def new_run_id(self, name: str) -> str:
        """A fresh, unique, DNS-1123-safe id such as ``digits-3fa9c2`` (directory reserved on return)."""
        self.ensure_writable()
        for _ in range(100):
            run_id = f"{slugify(name)[:40]}-{secrets.token_hex(3)}"
            try:
                self.run_dir(run_id).mkdir(mode=PRIVATE_DIR)
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
        data = read_json(path)
        try:
            if not isinstance(data, dict):
                raise TypeError(f"a JSON {type(data).__name__}, not an object")
            return RunRecord.from_dict(data)
        except (KeyError, TypeError, ValueError) as error:
            what = f"no {error}" if isinstance(error, KeyError) else str(error)
            raise StoreFileError(f"run {run_id}: {path} is not a run record nbtrain can read ({what}); restore the "
                                 "file, or move the run's directory out of the store.") from None

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
        """Every readable record, newest first (records that fail to parse are skipped: :meth:`scan` names them)."""
        return self.scan()[0]

    def scan(self) -> tuple[list[RunRecord], list[str]]:
        """Every readable record, newest first, and one message per run whose record cannot be read (naming the run
        and the file: :meth:`load`'s StoreFileError). A run removed while scanning is simply gone."""
        out, problems = [], []
        for run_id in self.ids():
            try:
                out.append(self.load(run_id))
            except RunNotFoundError:
                continue
            except (OSError, ValueError) as error:
                problems.append(str(error) if isinstance(error, StoreFileError) else
                                f"run {run_id}: {self.run_dir(run_id) / 'record.json'} cannot be read ({error}).")
        return sorted(out, key=lambda r: r.created, reverse=True), problems
