"""Warm gangs kept in the store (``STORE/gangs/ID/``): find or start one, claim it for a run, list, stop.

``gang.json`` holds the gang's key and facts (:mod:`nbtrain.warm.key`), its owner (the process that started it:
the kernel; its lease), the idle TTL, the node count, the generation counter and the current claim (one run at
a time). ``node-N.json`` is written by each agent once it is ready (pid and identity); ``node-N.sock`` is its
control socket; ``agent-N.log`` its output. Read-modify-writes of ``gang.json`` hold ``lock`` (flock).
Every process of a gang (agents and what they forked) carries ``NBTRAIN_WARM_GANG=ID`` in its environment.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbtrain.errors import BackendError, NbtrainError
from nbtrain.filelock import locked
from nbtrain.gang import procs
from nbtrain.runtime import watchdog
from nbtrain.store import Store, write_json_atomic
from nbtrain.warm import key as gang_key
from nbtrain.warm import marker, protocol

__all__ = [
    "MARKER", "GangBusy", "GangInfo", "acquire", "environment_stamp", "find_gang", "fork_supervisor", "gang_pids", "list_gangs", "next_generation",
    "note_supervisor", "release", "stop_gang", "wait_ready",
]

MARKER = "NBTRAIN_WARM_GANG"
START_TIMEOUT_S = 180.0
CLAIM_GRACE_S = 120.0  # a claim whose supervisor has not started after this long is stale
_children: list[subprocess.Popen[bytes]] = []


class GangBusy(NbtrainError):
    """The warm gang a run would use is running another run (one run at a time)."""


@dataclass(frozen=True)
class GangInfo:
    """One warm gang as ``%nbtrain gangs`` shows it."""

    id: str
    backend: str
    shape: str
    state: str  # "busy (run R)", "idle", "starting", "dead"
    idle_s: float | None
    rss_mb: float
    generation: int
    created: float
    directory: Path
    last_recycle: str = ""  # why the gang's latest recycled generation was, "rank 1 raised ValueError (gen 3)"


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object file of the gang; {} when missing or unreadable (an agent may be writing it)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _root(store: Store) -> Path:
    root = store.root / "gangs"
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    return root


def _reap() -> None:
    for child in list(_children):
        if child.poll() is not None:
            _children.remove(child)


def _agents_alive(gang_dir: Path, nodes: int) -> bool:
    for node in range(nodes):
        ident = read_json(gang_dir / f"node-{node}.json").get("identity")
        if not ident or not watchdog.alive(str(ident)):
            return False
    return True


def _starting(gang: dict[str, Any]) -> bool:
    """The gang's agents were started and are all still alive (some may not be ready yet)."""
    starting = [str(x) for x in gang.get("starting", [])]
    return bool(starting) and all(watchdog.alive(ident) for ident in starting)


def _claim_live(claim: dict[str, Any] | None) -> bool:
    if not claim:
        return False
    supervisor = claim.get("supervisor")
    if supervisor:
        return watchdog.alive(str(supervisor))
    return time.time() - float(claim.get("at", 0)) < CLAIM_GRACE_S


def gang_pids(gang_id: str) -> list[int]:
    """Live processes of a gang (its agents, their store holders and ranks): ``NBTRAIN_WARM_GANG=ID``."""
    return procs.pids_with_env(MARKER, gang_id)


def acquire(store: Store, key: str, facts: dict[str, Any], *, run_id: str, ttl_s: float, python: str) -> Path:
    """The directory of a live gang with ``key`` owned by this process, claimed for ``run_id``; started if none.

    Returns at once (a new gang's agents start in the background: :func:`wait_ready`). A new gang replaces this
    owner's idle gangs of other keys (a changed cell option, environment or package: their processes would only
    hold memory until their TTL); they are asked to stop, and the new run's monitor says why
    (:func:`note_supervisor`). Busy gangs and other owners' gangs are left alone. Raises :class:`GangBusy` when
    the gang of ``key`` runs another run, BackendError when a new gang's agents cannot be started.
    """
    _reap()
    root = _root(store)
    owner = watchdog.identity()
    with locked(root / ".lock"):
        for gang_dir in sorted(p for p in root.iterdir() if p.is_dir()):
            gang = read_json(gang_dir / "gang.json")
            if gang.get("key") != key or gang.get("owner") != owner or (gang_dir / "stop").exists():
                continue
            if not (_agents_alive(gang_dir, int(gang.get("nodes", 0))) or _starting(gang)):
                continue
            with locked(gang_dir / "lock"):
                gang = read_json(gang_dir / "gang.json")
                claim = gang.get("claim") or {}
                if _claim_live(claim):
                    raise GangBusy(
                        f"--warm: the warm gang {gang_dir.name} of this shape is running run {claim['run_id']} (one "
                        "run at a time per gang); wait for it (run.wait()), cancel it, or run this cell without "
                        "--warm.")
                gang["claim"] = {"run_id": run_id, "at": time.time()}
                gang["ttl_s"] = ttl_s
                write_json_atomic(gang_dir / "gang.json", gang)
            return gang_dir
        gang_dir = root / f"gang-{key[:8]}-{os.urandom(3).hex()}"
        protocol.check_socket_path(gang_dir / f"node-{int(facts['nodes']) - 1}.sock", store.root)  # before anything starts
        replaced = _ended_before(root, key, owner, gang_dir.name) + _retire_idle(root, owner, facts, gang_dir.name)
        gang_dir.mkdir(mode=0o700)
        nodes = int(facts["nodes"])
        write_json_atomic(gang_dir / "gang.json", {
            "id": gang_dir.name, "key": key, "facts": facts, "backend": "local", "owner": owner, "ttl_s": ttl_s,
            "nodes": nodes, "agents": list(range(nodes)), "created": time.time(), "generation": 0,
            "claim": {"run_id": run_id, "at": time.time()}, "recycled": [], "notices": replaced,
        })
    _start_agents(gang_dir, nodes, python)
    return gang_dir


def _ended_before(root: Path, key: str, owner: str, successor: str) -> list[str]:
    """Why ``owner``'s earlier gangs of ``key`` ended on their own (idle TTL, a dead sibling agent): a notice each,
    for the run that starts gang ``successor`` instead (its agents import torch and Accelerate first: a slower start
    than a warm run). Their directories are removed (nothing of them runs; :func:`list_gangs` would remove them).

    Called holding the registry's lock. Stopped gangs (a stop file: ``%nbtrain gang stop``, a changed key) are
    left alone: who stopped them knows, and a changed key has its own notice.
    """
    notices = []
    for gang_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        gang = read_json(gang_dir / "gang.json")
        if gang.get("key") != key or gang.get("owner") != owner or (gang_dir / "stop").exists():
            continue
        if _agents_alive(gang_dir, int(gang.get("nodes", 0))) or _starting(gang):
            continue
        endings = sorted((read_json(p) for p in gang_dir.glob("ended-*.json")), key=lambda e: float(e.get("at", 0)))
        shutil.rmtree(gang_dir, ignore_errors=True)
        if not endings:
            continue  # its agents were killed, or ended before they were ready: nothing recorded why
        first = endings[0]
        if first.get("idle_ttl"):
            why = (f"it was idle for {float(first.get('idle_s', 0)):.0f} s, more than its idle TTL "
                   f"(--warm-ttl {float(first.get('ttl_s', 0)):g} s)")
        else:
            why = f"its agent of node {first.get('node')} exited: {first.get('reason')}"
        ago = max(0.0, time.time() - float(first.get("at", 0)))
        notices.append(f"warm gang {gang_dir.name} of this shape ended {ago:.0f} s ago ({why}); a new warm gang "
                       f"({successor}) started for this run: its agents import torch and Accelerate once first, so "
                       "this run starts slower than a warm run")
    return notices


def _retire_idle(root: Path, owner: str, facts: dict[str, Any], successor: str) -> list[str]:
    """Stop ``owner``'s idle gangs (a new gang ``successor`` with ``facts`` starts); a notice for each.

    Called holding the registry's lock, under which alone a gang is claimed: a gang seen idle here stays idle.
    Marks each stopped (no run may claim it) and asks its agents to exit (they end what they forked); does not
    wait for them.
    """
    notices = []
    for gang_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        gang = read_json(gang_dir / "gang.json")
        if gang.get("owner") != owner or (gang_dir / "stop").exists() or _claim_live(gang.get("claim")):
            continue
        if not _agents_alive(gang_dir, int(gang.get("nodes", 0))):
            continue  # starting (then claimed: busy) or already ended
        with contextlib.suppress(OSError):
            (gang_dir / "stop").touch()
        for sock in gang_dir.glob("node-*.sock"):
            with contextlib.suppress(protocol.AgentUnreachable):
                protocol.call(sock, protocol.Stop(), timeout=2.0)
        what = ", ".join(gang_key.changed(gang.get("facts") or {}, facts)) or "its key"
        notices.append(f"warm gang {gang_dir.name} was stopped: this cell changed {what}, so it needs a new gang "
                       f"({successor}), and an idle gang of the old settings would only hold memory until its TTL")
    return notices


def _start_agents(gang_dir: Path, nodes: int, python: str) -> None:
    """Start one agent per node, detached (their own sessions); :func:`wait_ready` waits for them."""
    env = dict(os.environ)
    env[MARKER] = gang_dir.name
    env.update(marker.slot_env())  # the ranks write their run id there (found by it as a cold rank is)
    for name in ("NBTRAIN_RUN_ID", "NBTRAIN_SUPERVISOR_OF", watchdog.ENV_SUPERVISOR):
        env.pop(name, None)  # not a run's process: ending a run must not end its gang
    pids = []
    for node in range(nodes):
        log = os.open(gang_dir / f"agent-{node}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            child = subprocess.Popen([python, "-m", "nbtrain.warm.agent", str(gang_dir), str(node)],
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                     cwd=str(gang_dir), start_new_session=True)
        except OSError as error:
            stop_gang(gang_dir)
            raise BackendError(f"--warm: could not start the warm gang's agents with {python}: {error}") from error
        finally:
            os.close(log)
        _children.append(child)
        pids.append(watchdog.identity(child.pid))
    with locked(gang_dir / "lock"):
        gang = read_json(gang_dir / "gang.json")
        gang["starting"] = pids
        write_json_atomic(gang_dir / "gang.json", gang)


def wait_ready(gang_dir: Path, *, timeout: float = START_TIMEOUT_S,
               progress: Callable[[str], None] | None = None) -> None:
    """Wait until every agent of the gang is ready; BackendError naming the agent and its output otherwise."""
    gang = read_json(gang_dir / "gang.json")
    nodes = int(gang.get("nodes", 0))
    starting = [str(x) for x in gang.get("starting", [])]
    if all((gang_dir / f"node-{n}.json").exists() for n in range(nodes)):
        return
    if progress is not None:
        progress(f"starting warm gang {gang_dir.name}: {nodes} agent(s) import torch and Accelerate once")
    deadline = time.monotonic() + timeout
    while not all((gang_dir / f"node-{n}.json").exists() for n in range(nodes)):
        dead = [n for n, ident in enumerate(starting)
                if not watchdog.alive(ident) and not (gang_dir / f"node-{n}.json").exists()]
        if dead or time.monotonic() > deadline:
            node = dead[0] if dead else 0
            try:
                tail = (gang_dir / f"agent-{node}.log").read_text(errors="replace").strip().splitlines()[-12:]
            except OSError:
                tail = []
            what = "exited" if dead else f"was not ready within {timeout:g} s"
            raise BackendError(f"--warm: the agent of node {node} of warm gang {gang_dir.name} {what}; its output:\n  "
                               + "\n  ".join(tail or ["(none)"]))
        time.sleep(0.05)


def fork_supervisor(gang_dir: Path, attempt_dir: Path, *, env: dict[str, str], cwd: str, log: Path) -> int | None:
    """Have the ready agent of node 0 fork the attempt's supervisor; its pid, or None (not ready: start one)."""
    if not (gang_dir / "node-0.json").exists():
        return None
    try:
        message = protocol.Supervise(attempt_dir=str(attempt_dir), env=env, cwd=cwd, log=str(log))
        answer = protocol.call(gang_dir / "node-0.sock", message, timeout=10.0)
    except protocol.AgentUnreachable:
        return None
    return int(answer["pid"]) if answer.get("ok") else None


def note_supervisor(gang_dir: Path, run_id: str, identity: str) -> list[str]:
    """The supervisor of ``run_id`` started: the claim lives as long as it does.

    Returns, once, what the gang has to tell this run's monitor: why the previous run's ranks were ended early
    (the gang was recycled), and which gangs this gang's start replaced (:func:`acquire`).
    """
    with locked(gang_dir / "lock"):
        gang = read_json(gang_dir / "gang.json")
        claim = gang.get("claim") or {}
        if claim.get("run_id") != run_id:
            return []
        claim["supervisor"] = identity
        gang["claim"] = claim
        recycle = gang.pop("last_recycle", None)
        notices = [str(n) for n in gang.pop("notices", None) or []]
        write_json_atomic(gang_dir / "gang.json", gang)
    if isinstance(recycle, dict):
        notices.insert(0, f"warm gang {gang_dir.name}: the ranks of run {recycle.get('run_id')} were recycled "
                          f"({recycle.get('why')}); this run's ranks are new processes")
    return notices


def next_generation(gang_dir: Path) -> int:
    """A new generation number of the gang (one per attempt it runs)."""
    with locked(gang_dir / "lock"):
        gang = read_json(gang_dir / "gang.json")
        gang["generation"] = int(gang.get("generation", 0)) + 1
        write_json_atomic(gang_dir / "gang.json", gang)
        return int(gang["generation"])


def release(gang_dir: Path, run_id: str, *, recycled: str | None = None, generation: int = 0) -> None:
    """``run_id`` is done with the gang; ``recycled``: why its ranks (of ``generation``) were recycled (shown)."""
    with locked(gang_dir / "lock"):
        gang = read_json(gang_dir / "gang.json")
        if not gang:
            return
        if (gang.get("claim") or {}).get("run_id") == run_id:
            gang["claim"] = None
        gang["last_used"] = time.time()
        if recycled:
            entry = {"run_id": run_id, "why": recycled, "at": time.time(), "generation": generation}
            gang["recycled"] = [*gang.get("recycled", [])[-9:], entry]
            gang["last_recycle"] = entry
        write_json_atomic(gang_dir / "gang.json", gang)


def environment_stamp(python: str) -> dict[str, str]:
    """What the agents' interpreter and packages are, cheaply (no import, a few ms): part of the gang key.

    - the interpreter path;
    - for torch, Accelerate and nbtrain, the location and modification time of their package (an upgrade in
      place changes it);
    - ``distributions``: a digest of the installed distributions and their versions (the ``*.dist-info`` and
      ``*.egg-info`` entries importlib.metadata reads on ``sys.path``, by name: installing, removing or
      upgrading any package changes it, a dependency of torch included);
    - ``nbtrain_sources``: a digest of nbtrain's own source files (path, size, modification time): an editable
      install edited in place changes it, as the agents run the nbtrain they imported at their start.

    The agents import nothing else (a user's own modules and packages are imported afresh by each run's ranks).
    Another interpreter than this process's: its path only.
    """
    import importlib.util

    stamp = {"python": python}
    if os.path.realpath(python) != os.path.realpath(sys.executable):
        return stamp
    for name in ("torch", "accelerate", "nbtrain"):
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        try:
            stamp[name] = f"{origin}@{os.stat(origin).st_mtime_ns}" if origin else "absent"
        except OSError:
            stamp[name] = "absent"
    stamp["distributions"] = _distributions_digest(sys.path)
    stamp["nbtrain_sources"] = _sources_digest(Path(__file__).resolve().parents[1])
    return stamp


def _distributions_digest(path: list[str]) -> str:
    """A digest of the distributions installed on ``path`` (their metadata directories' names: name-version)."""
    found = []
    for entry in dict.fromkeys(path):
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        found += [f"{entry}/{name}" for name in names if name.endswith((".dist-info", ".egg-info"))]
    return hashlib.sha256("\n".join(sorted(found)).encode()).hexdigest()[:16]


def _sources_digest(package: Path) -> str:
    """A digest of the ``.py`` files under ``package``: relative path, size and modification time of each."""
    digest = hashlib.sha256()
    for directory, subdirs, files in os.walk(package):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(directory, name)
            try:
                info = os.stat(path)
            except OSError:
                continue
            digest.update(f"{os.path.relpath(path, package)}:{info.st_size}:{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def _rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1024


def list_gangs(store: Store) -> list[GangInfo]:
    """Every live warm gang of the store, newest first (the directory of one whose agents ended is removed)."""
    _reap()
    out = []
    for gang_dir in (p for p in _root(store).iterdir() if p.is_dir()):
        gang = read_json(gang_dir / "gang.json")
        if not gang:
            continue
        nodes = int(gang.get("nodes", 0))
        facts = gang.get("facts") or {}
        per_node = len((facts.get("ranks") or [[]])[0])
        claim = gang.get("claim") or {}
        alive = _agents_alive(gang_dir, nodes)
        if not alive:
            if _starting(gang):
                state = "starting"
            else:  # its agents ended (TTL, owner gone, a sibling died): nothing of it runs; forget it
                shutil.rmtree(gang_dir, ignore_errors=True)
                continue
        elif _claim_live(claim):
            state = f"busy (run {claim['run_id']})"
        else:
            state = "idle"
        last = float(gang.get("last_used") or gang.get("created") or time.time())
        recycles = gang.get("recycled") or [{}]
        recycle = recycles[-1] if isinstance(recycles[-1], dict) else {}
        out.append(GangInfo(id=gang_dir.name, backend=str(gang.get("backend", "local")), shape=f"{nodes}x{per_node}",
                            state=state, idle_s=time.time() - last if state == "idle" else None,
                            rss_mb=_rss_mb(gang_pids(gang_dir.name)) if alive else 0.0,
                            generation=int(gang.get("generation", 0)), created=float(gang.get("created", 0)),
                            directory=gang_dir,
                            last_recycle=f"{recycle['why']} (gen {recycle.get('generation') or '?'})"
                            if recycle.get("why") else ""))
    return sorted(out, key=lambda g: -g.created)


def stop_gang(gang_dir: Path, *, timeout: float = 10.0) -> int:
    """End a gang: ask its agents to stop (they end their ranks), SIGKILL what remains; remove its directory.

    Returns how many processes had to be killed.
    """
    gang_id = gang_dir.name
    with contextlib.suppress(OSError):
        (gang_dir / "stop").touch()
    for sock in gang_dir.glob("node-*.sock"):
        with contextlib.suppress(protocol.AgentUnreachable):
            protocol.call(sock, protocol.Stop(), timeout=2.0)
    deadline = time.monotonic() + timeout
    while gang_pids(gang_id) and time.monotonic() < deadline:
        _reap()
        time.sleep(0.05)
    killed = 0
    for pid in gang_pids(gang_id):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed += 1
    end = time.monotonic() + 5.0
    while gang_pids(gang_id) and time.monotonic() < end:
        _reap()
        time.sleep(0.05)
    _reap()
    shutil.rmtree(gang_dir, ignore_errors=True)
    return killed


def find_gang(store: Store, gang_id: str) -> Path:
    """The directory of the gang ``gang_id`` (a unique prefix is enough); NbtrainError naming the gangs otherwise."""
    gangs = [p for p in _root(store).iterdir() if p.is_dir() and p.name.startswith(gang_id)]
    if len(gangs) == 1:
        return gangs[0]
    known = ", ".join(sorted(p.name for p in _root(store).iterdir() if p.is_dir())) or "none"
    what = "no" if not gangs else "more than one"
    raise NbtrainError(f"{what} warm gang matches {gang_id!r}; warm gangs: {known} (%nbtrain gangs lists them).")


if sys.platform != "linux":  # pragma: no cover - the agents rely on fork, process groups and /proc
    raise ImportError("warm gangs need Linux")
