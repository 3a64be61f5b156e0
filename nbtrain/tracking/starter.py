"""Starting and finding a run's tracking agent, from the kernel (stdlib only: never imports mlflow).

MLflow forwarding runs beside the run, in one detached process per run (:mod:`nbtrain.tracking.agent`),
so a run is tracked whether or not a kernel watches it, and watching costs the kernel nothing for MLflow.
The launch path (:mod:`nbtrain.client.launch`) starts it at submit, rerun and resume; ``attach`` starts it
again when it died before the MLflow run was complete. The kernel only reads what it leaves.

Files in ``runs/<id>/`` (all private, like the rest of the store)::

    tracking-agent.json       where the run is tracked, resolved once by the process that launched it:
                              {"tracking_uri", "experiment", "cwd"} (a replacement agent uses the same)
    tracking-agent.lock       flock held by the live agent (one per run); its pid inside
    tracking-agent.log        the agent's log (appended; credentials in the URI are never written)
    tracking-agent.state.json the agent's last problem with MLflow, read by kernels as a run notice

The URI is resolved the way MLflow would in the launching process, without importing it: the URI set in
this process when mlflow is already imported (``mlflow.set_tracking_uri``), ``MLFLOW_TRACKING_URI``, else
MLflow 3's default ``sqlite:///mlflow.db`` (``./mlruns`` when that holds file-store data) in the current
directory; always made absolute, since the agent may be restarted from another directory. The agent gets
it in its environment as ``MLFLOW_TRACKING_URI`` (not on its command line, which every user can read).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nbtrain.filelock import is_locked
from nbtrain.model import is_terminal
from nbtrain.runtime.watchdog import start_time
from nbtrain.spec import tracking_default
from nbtrain.store import RunRecord, Store, write_json_atomic
from nbtrain.tracking.ledger import Ledger
from nbtrain.tracking.links import LEDGER_NAME

__all__ = [
    "AGENT_LOCK",
    "AGENT_LOG",
    "AGENT_MARKER",
    "AgentProblems",
    "agent_alive",
    "agent_error",
    "ensure_agent",
    "finalized",
    "needs_agent",
    "resolve_tracking_uri",
    "wait_finalized",
]

AGENT_CONFIG = "tracking-agent.json"
AGENT_LOCK = "tracking-agent.lock"
AGENT_LOG = "tracking-agent.log"
AGENT_STATE = "tracking-agent.state.json"
#: In the agent's environment (``NBTRAIN_TRACKING_OF=<run id>``): how tests and tools find leftover agents.
AGENT_MARKER = "NBTRAIN_TRACKING_OF"

_children: dict[str, subprocess.Popen[bytes]] = {}  # run id -> the agent this process started last
_children_lock = threading.Lock()


# -- pure decisions ----------------------------------------------------------------------------------
def absolute_uri(uri: str, cwd: str) -> str:
    """``uri`` with a relative local path made absolute against ``cwd`` (servers and absolute URIs unchanged)."""
    uri = uri.strip()
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        rest = uri[len("sqlite:///"):]
        if rest and rest != ":memory:":
            return "sqlite:///" + os.path.normpath(os.path.join(cwd, rest))
        return uri
    if uri.startswith("file:") and not uri.startswith("file:/"):
        return "file://" + os.path.normpath(os.path.join(cwd, uri[len("file:"):]))
    if "://" not in uri and ":" not in uri.split("/", 1)[0] and uri not in ("databricks",):
        return "file://" + os.path.normpath(os.path.join(cwd, uri))  # a bare path: MLflow's file store
    return uri


def _has_mlruns_data(cwd: str) -> bool:
    """MLflow 3 keeps ``./mlruns`` as the default store when it holds file-store experiments."""
    try:
        with os.scandir(os.path.join(cwd, "mlruns")) as entries:
            return any(e.is_dir() and e.name.isdigit() and os.path.lexists(os.path.join(e.path, "meta.yaml"))
                       for e in entries)
    except OSError:
        return False


def resolve_tracking_uri(env: Mapping[str, str] | None = None, cwd: str | None = None) -> str:
    """The tracking URI MLflow would use in this process, absolute (see the module docstring)."""
    env = os.environ if env is None else env
    cwd = cwd or os.getcwd()
    mlflow = sys.modules.get("mlflow")
    if mlflow is not None and env is os.environ:  # already imported (the user's own tracking): ask it, for free
        try:
            return absolute_uri(str(mlflow.get_tracking_uri()), cwd)
        except Exception:  # noqa: BLE001 - a half-imported or odd mlflow: fall back to the environment
            pass
    uri = (env.get("MLFLOW_TRACKING_URI") or "").strip()
    if uri:
        return absolute_uri(uri, cwd)
    if _has_mlruns_data(cwd):
        return "file://" + os.path.join(cwd, "mlruns")
    return "sqlite:///" + os.path.join(cwd, "mlflow.db")


def finalized(ledger: Ledger, attempt: int, state: str) -> bool:
    """True when the MLflow run is complete for ``attempt`` ending in ``state`` (status set, artifacts up)."""
    done = ledger.finalized
    return done is not None and done.get("state") == state and int(done.get("attempt", -1)) >= attempt


def needs_agent(record: RunRecord, ledger: Ledger) -> bool:
    """True unless the record says the run ended and the ledger says MLflow has all of it.

    A record whose verdict nobody noticed yet (still "running" after the gang ended) needs an agent: it
    finds out, finishes what is missing, and exits.
    """
    if not record.spec.tracking:
        return False
    if not is_terminal(record.state):
        return True
    return not finalized(ledger, record.latest_attempt, record.state)


# -- the agent's lock -----------------------------------------------------------------------------------
def _lock_pid(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _reap() -> None:
    with _children_lock:
        for run_id, child in list(_children.items()):
            if child.poll() is not None:
                del _children[run_id]


def agent_alive(run_dir: Path) -> bool:
    """True while an agent follows the run of ``run_dir`` (or one this process started is still starting)."""
    lock = run_dir / AGENT_LOCK
    if is_locked(lock):
        # a killed agent's lock outlives it briefly (its other threads are still exiting while it shows as a
        # zombie): a holder that no longer runs is on its way out, and a new agent waits for the lock
        pid = _lock_pid(lock)
        return not pid or start_time(pid) is not None
    _reap()
    with _children_lock:
        child = _children.get(run_dir.name)
    # started here and not yet holding the lock (importing): alive; held it and let go: it is on its way out
    return child is not None and child.poll() is None and _lock_pid(lock) != child.pid


# -- starting ---------------------------------------------------------------------------------------
def _config(run_dir: Path, record: RunRecord) -> dict[str, str]:
    """Where the run is tracked: decided once, by the first process that starts its agent."""
    path = run_dir / AGENT_CONFIG
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("tracking_uri") and data.get("experiment"):
            return {k: str(v) for k, v in data.items()}
    except (OSError, ValueError):
        pass
    from nbtrain.tracking.describe import experiment_name

    cwd = os.getcwd()
    data = {"tracking_uri": resolve_tracking_uri(cwd=cwd), "experiment": experiment_name(record.spec, record.notebook),
            "cwd": cwd}
    write_json_atomic(path, data)
    return data


def ensure_agent(store: Store, record: RunRecord) -> int | None:
    """Start the run's tracking agent unless one lives or nothing is left to track; the new agent's pid, or None.

    Nothing with tracking off (``--no-tracking``, ``NBTRAIN_TRACKING=0``). The agent runs in its own session
    (it outlives this process, and a Ctrl-C here never reaches it), with ``NBTRAIN_TRACKING_OF=<run id>`` in
    its environment. Two processes starting one at once is harmless: the second agent finds the lock taken
    and exits. Raises OSError when the agent cannot be started.
    """
    if not (record.spec.tracking and tracking_default()):
        return None
    run_dir = store.run_dir(record.run_id)
    if agent_alive(run_dir) or not needs_agent(record, Ledger.load(run_dir / LEDGER_NAME)):
        return None
    config = _config(run_dir, record)
    env = dict(os.environ)
    env[AGENT_MARKER] = record.run_id
    env["MLFLOW_TRACKING_URI"] = config["tracking_uri"]
    for name in ("NBTRAIN_RUN_ID", "NBTRAIN_SUPERVISOR_OF"):  # not a gang process: cancel must not end it
        env.pop(name, None)
    cwd = config.get("cwd") or ""
    argv = [sys.executable, "-m", "nbtrain.client.agent", record.run_id, "--store", str(store.root),
            "--experiment", config["experiment"]]
    log = os.open(run_dir / AGENT_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True, env=env,
                                 cwd=cwd if os.path.isdir(cwd) else str(run_dir))  # MLflow puts ./mlruns there
    finally:
        os.close(log)
    with _children_lock:
        _children[record.run_id] = child
    return child.pid


# -- reading what the agent leaves ---------------------------------------------------------------
def wait_finalized(store: Store, run_id: str, *, attempt: int, state: str, timeout: float) -> Ledger:
    """Wait until MLflow has all of ``attempt``; the ledger.

    At most ``timeout`` s, and less when no agent lives or the agent reports a problem with MLflow (it goes
    on retrying in the background; the caller shows the problem rather than making the user wait for it).
    """
    run_dir = store.run_dir(run_id)
    deadline = time.monotonic() + timeout
    while True:
        ledger = Ledger.load(run_dir / LEDGER_NAME)
        if (finalized(ledger, attempt, state) or time.monotonic() >= deadline or not agent_alive(run_dir)
                or agent_error(run_dir)):
            return ledger
        time.sleep(0.1)


def agent_error(run_dir: Path) -> str | None:
    """The agent's latest problem with MLflow (None when it has none)."""
    try:
        data: Any = json.loads((run_dir / AGENT_STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    error = data.get("error") if isinstance(data, dict) else None
    return str(error) if error else None


class AgentProblems:
    """The agent's latest MLflow problem, for a kernel to show as a run notice (reads a small file, rarely)."""

    EVERY_S = 2.0

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / AGENT_STATE
        self._seen: int | None = None
        self._next = 0.0

    def poll(self) -> str | None:
        """A new problem since the last call (checked at most every ``EVERY_S``); None when there is none."""
        now = time.monotonic()
        if now < self._next:
            return None
        self._next = now + self.EVERY_S
        try:
            mtime = self.path.stat().st_mtime_ns
        except OSError:
            return None
        if mtime == self._seen:
            return None
        self._seen = mtime
        return agent_error(self.path.parent)
