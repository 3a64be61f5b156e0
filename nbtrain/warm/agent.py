"""The agent of one node of a warm gang: ``python -m nbtrain.warm.agent GANG_DIR NODE``.

It imports torch, Accelerate and nbtrain's worker once, never touches a GPU, and never runs user code: for
each generation it forks the node's ranks from that clean state (each in its own session, killed with the
agent, marked with its run id: :mod:`nbtrain.warm.marker`), and the agent of node 0 forks the generation's rendezvous store holder. It answers on
``GANG_DIR/node-NODE.sock`` (:mod:`nbtrain.warm.protocol`):

- ``store`` (node 0): fork a store holder for a generation; answers its port;
- ``fork``: fork the ranks of this node for a generation (environment from :mod:`nbtrain.warm.rankenv`);
- ``poll``: the exit codes of a generation's ranks (None while running; negative: killed by that signal);
- ``end``: end a generation: SIGTERM its ranks' process groups, SIGKILL after a grace, and its store holder;
  answers which ranks were still running (``ended``), how many had to be killed after the grace, and how many
  processes the ranks left running in their sessions (``leaked``: the post-run check); a generation whose supervisor died is ended the same way without being asked;
- ``supervise`` (node 0): fork the supervisor of a warm attempt (:mod:`nbtrain.warm.supervisor`), in its own
  session, with the environment, directory and log the run's submitter gives;
- ``ping``/``stop``.

It exits, ending everything it forked, when the gang directory says stop or is gone, when a sibling agent
died, or once idle (no generation running) while its lease lapsed: the owner (the kernel that started the
gang) is gone, or it has been idle longer than the gang's TTL.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import select
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbtrain.gang import procs
from nbtrain.runtime import watchdog
from nbtrain.store import write_json_atomic
from nbtrain.warm import marker, protocol
from nbtrain.warm.rankenv import accelerate_env, worker_env
from nbtrain.warm.registry import read_json

__all__ = ["Agent", "main"]

TICK_S = 0.2
LEASE_CHECK_S = 1.0


def _die_with_parent(sig: int = signal.SIGKILL) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@dataclass
class Generation:
    """The processes one generation has on this node."""

    number: int
    ranks: dict[int, int] = field(default_factory=dict)  # rank -> pid (also its process group)
    exits: dict[int, int] = field(default_factory=dict)  # rank -> exit code (negative: signal)
    store_pid: int | None = None
    supervisor: str = ""  # identity of the run's supervisor: the generation ends when it is gone
    ended: bool = False

    @property
    def running(self) -> bool:
        return not self.ended and any(r not in self.exits for r in self.ranks)


class Agent:
    """See the module docstring."""

    def __init__(self, gang_dir: Path, node: int) -> None:
        self.dir, self.node = gang_dir, node
        self.sock_path = gang_dir / f"node-{node}.sock"
        self.generations: dict[int, Generation] = {}
        self.by_pid: dict[int, tuple[int, int]] = {}  # pid -> (generation, rank)
        self.idle_since = time.time()
        self.listener: socket.socket | None = None
        self.stopping = False

    # -- lifetime ---------------------------------------------------------------------------------
    def serve(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self.sock_path.unlink(missing_ok=True)
        listener = self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.sock_path))
        os.chmod(self.sock_path, 0o600)
        listener.listen(16)
        ready = {"node": self.node, "pid": os.getpid(), "identity": watchdog.identity(), "ready": time.time()}
        write_json_atomic(self.dir / f"node-{self.node}.json", ready)
        checked = 0.0
        reason = ""
        try:
            while not self.stopping:
                readable, _, _ = select.select([listener], [], [], TICK_S)
                if readable:
                    self._answer(listener)
                self._reap()
                now = time.monotonic()
                if now - checked >= LEASE_CHECK_S:
                    checked = now
                    self._end_orphans()
                    reason = self._lapsed()
                    if reason:
                        break
        finally:
            idle_s = time.time() - self.idle_since
            for gen in list(self.generations.values()):
                self._end(gen, grace_s=1.0)
            listener.close()
            self.sock_path.unlink(missing_ok=True)
            self._note_ending(reason, idle_s)
            print(f"[nbtrain warm agent {self.node}] exiting: {reason or 'stopped'}", flush=True)
        return 0

    def _note_ending(self, reason: str, idle_s: float) -> None:
        """Leave why this agent ended its gang in ``ended-NODE.json`` for the next run of this shape (its notice:
        :func:`nbtrain.warm.registry.acquire`); nothing when stopped on request (who asked knows) or when the gang's
        directory is gone."""
        if not reason or reason == "asked to stop" or not self.dir.is_dir():
            return
        gang = read_json(self.dir / "gang.json")
        ttl = float(gang.get("ttl_s") or 0)
        with contextlib.suppress(OSError):
            write_json_atomic(self.dir / f"ended-{self.node}.json",
                              {"node": self.node, "reason": reason, "at": time.time(), "idle_s": round(idle_s, 1),
                               "ttl_s": ttl, "idle_ttl": bool(ttl) and reason.startswith("idle for")})

    def _on_signal(self, signum: int, frame: object) -> None:
        self.stopping = True

    def _lapsed(self) -> str:
        """Why this agent should exit now ("" to stay)."""
        gang = read_json(self.dir / "gang.json")
        if not self.dir.is_dir() or not gang:
            return "the gang's directory is gone"
        if (self.dir / "stop").exists():
            return "asked to stop"
        for other in gang.get("agents", []):
            ident = read_json(self.dir / f"node-{other}.json").get("identity")
            if other != self.node and ident and not watchdog.alive(str(ident)):
                return f"the agent of node {other} is gone"
        if any(g.running for g in self.generations.values()):
            self.idle_since = time.time()
            return ""
        owner = str(gang.get("owner") or "")
        if owner and not watchdog.alive(owner):
            return f"its owner ({owner.split(':')[0]}) is gone"
        ttl = float(gang.get("ttl_s") or 0)
        if ttl and time.time() - self.idle_since > ttl:
            return f"idle for more than {ttl:g} s"
        return ""

    def _end_orphans(self) -> None:
        """End the generations whose supervisor died (killed, out of memory): nothing else would end them.

        Their ranks end themselves when they notice (:func:`nbtrain.runtime.watchdog.watch_supervisor`), but not
        what they forked, nor the generation's store holder; the run's verdict is written by whoever reads its
        status next (the local backend's orphan path).
        """
        for number, gen in list(self.generations.items()):
            if gen.supervisor and not watchdog.alive(gen.supervisor):
                self._end(gen, grace_s=1.0)
                self.generations.pop(number, None)

    # -- requests ---------------------------------------------------------------------------------
    def _answer(self, listener: socket.socket) -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(10)
            try:
                answer = self._handle(protocol.parse(protocol.read_message(conn)))
            except Exception as error:  # noqa: BLE001 - a bad request is answered, never fatal to the agent
                answer = {"ok": False, "error": f"{type(error).__name__}: {error}"}
            try:
                protocol.write_message(conn, answer)
            except OSError:
                pass

    def _handle(self, message: protocol.Message) -> dict[str, Any]:
        """The answer to one (already checked) message."""
        if isinstance(message, protocol.Ping):
            return {"ok": True, "pid": os.getpid(), "node": self.node,
                    "running": sorted(g.number for g in self.generations.values() if g.running)}
        if isinstance(message, protocol.Stop):
            self.stopping = True
            return {"ok": True}
        if isinstance(message, protocol.Supervise):
            return {"ok": True, "pid": self._fork_supervisor(message)}
        if isinstance(message, protocol.StartStore):
            fresh = self.generations.setdefault(message.generation, Generation(message.generation))
            fresh.supervisor = message.supervisor
            fresh.store_pid, port = self._fork_store(message.host or "127.0.0.1")
            return {"ok": True, "port": port}
        if isinstance(message, protocol.ForkRanks):
            return {"ok": True, "pids": self._fork_ranks(message)}
        self._reap()
        gen = self.generations.get(message.generation)
        if isinstance(message, protocol.Poll):
            if gen is None:
                return {"ok": True, "exits": {}, "known": False}
            return {"ok": True, "known": True,
                    "exits": {str(r): gen.exits.get(r) for r in gen.ranks}}
        leaked = self._leaked(gen) if gen is not None else 0  # End
        ended = sorted(r for r in gen.ranks if r not in gen.exits) if gen is not None else []
        killed = self._end(gen, grace_s=message.grace_s) if gen is not None else 0
        self.generations.pop(message.generation, None)
        return {"ok": True, "killed": killed, "leaked": leaked, "ended": ended}

    # -- processes --------------------------------------------------------------------------------
    def _child_setup(self) -> None:
        """In a forked child: its own session, dies with the agent, default signals, no agent sockets."""
        os.setsid()
        _die_with_parent()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        if self.listener is not None:
            self.listener.close()

    def _fork_supervisor(self, message: protocol.Supervise) -> int:
        """Fork the supervisor of a warm attempt (saves its interpreter start: nbtrain is imported here)."""
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                os.setsid()  # not _child_setup: the supervisor must outlive nothing but itself, no PDEATHSIG
                for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP, signal.SIGPIPE):
                    signal.signal(sig, signal.SIG_DFL)
                if self.listener is not None:
                    self.listener.close()
                log = os.open(message.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                os.dup2(log, 1)
                os.dup2(log, 2)
                os.close(log)
                os.environ.clear()
                os.environ.update(message.env)
                os.chdir(message.cwd)
                from nbtrain.warm.supervisor import run_attempts

                code = run_attempts(Path(message.attempt_dir))
            except SystemExit as done:
                code = done.code if isinstance(done.code, int) else 1
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        self.by_pid[pid] = (-1, -1)
        return pid

    def _fork_store(self, host: str) -> tuple[int, int]:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the store holder: a TCPStore server for one generation, until killed
            try:
                os.close(read_end)
                self._child_setup()
                from torch.distributed import TCPStore

                store = TCPStore(host, 0, is_master=True, wait_for_workers=False)
                os.write(write_end, str(store.port).encode())
                os.close(write_end)
                while True:
                    time.sleep(3600)
            finally:
                os._exit(70)
        os.close(write_end)
        try:
            ready, _, _ = select.select([read_end], [], [], 30)
            text = os.read(read_end, 32).decode() if ready else ""
        finally:
            os.close(read_end)
        if not text.isdigit():
            self._kill_group(pid, signal.SIGKILL)
            raise RuntimeError(f"the rendezvous store of this generation did not start on {host}")
        self.by_pid[pid] = (-1, -1)
        return pid, int(text)

    def _fork_ranks(self, message: protocol.ForkRanks) -> dict[str, int]:
        number, run_id, store = message.generation, message.run_id, message.store
        gen = self.generations.setdefault(number, Generation(number))
        base = dict(message.env)
        gen.supervisor = base.get(watchdog.ENV_SUPERVISOR, gen.supervisor)
        launch, shape = accelerate_env(message.argv, base)
        pids: dict[str, int] = {}
        for local_rank, rank in enumerate(message.ranks):
            env = {**base, **launch, **worker_env(
                rank=rank, local_rank=local_rank, node_rank=shape["node_rank"],
                nproc_per_node=shape["nproc_per_node"], nnodes=shape["nnodes"], master_addr=store.addr,
                store_port=store.port, generation=number, run_id=run_id)}
            pid = os.fork()
            if pid == 0:
                try:
                    self._child_setup()
                    marker.mark(procs.MARKER, run_id)  # found by run id, as an exec'd rank (cancel, orphans)
                    self._become_rank(env, message.cwd, message.bundle_dir)
                finally:
                    os._exit(70)
            gen.ranks[rank] = pid
            self.by_pid[pid] = (number, rank)
            pids[str(rank)] = pid
        self.idle_since = time.time()
        return pids

    @staticmethod
    def _become_rank(env: dict[str, str], cwd: str, bundle_dir: str) -> None:
        """In a forked child: the fresh-process state a cold rank starts from, then the cold rank's worker."""
        inherited = _pythonpath(os.environ.get("PYTHONPATH", ""), os.getcwd())  # the agent's, as it resolved them
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        sys.path[:] = _rank_sys_path(sys.path, inherited, _pythonpath(env.get("PYTHONPATH", ""), cwd), cwd)
        sys.argv = ["-m", bundle_dir]
        random.seed()  # a new process seeds from the OS; a fork would share the agent's state
        _fresh_signals()
        from nbtrain.runtime import worker

        worker.main([bundle_dir])  # ends the process (os._exit)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            number, rank = self.by_pid.pop(pid, (-1, -1))
            gen = self.generations.get(number)
            if gen is not None and rank >= 0:
                gen.exits[rank] = os.waitstatus_to_exitcode(status)
                if not gen.running:
                    self.idle_since = time.time()

    @staticmethod
    def _kill_group(pgid: int, sig: int) -> bool:
        try:
            os.killpg(pgid, sig)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    @staticmethod
    def _leaked(gen: Generation) -> int:
        """Processes still running in the sessions of ``gen``'s ranks once every rank exited (the post-run check:
        DataLoader workers, subprocesses); 0 while a rank still runs (then what it started is ended with it)."""
        if not gen.ranks or any(r not in gen.exits for r in gen.ranks):
            return 0
        sessions = {str(pid) for pid in gen.ranks.values()}
        count = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[-1].split()
            except OSError:
                continue
            if len(fields) > 3 and fields[3] in sessions and fields[0] not in ("Z", "X"):
                count += 1
        return count

    def _end(self, gen: Generation, *, grace_s: float) -> int:
        """End ``gen``: its ranks (and whatever they started: their sessions), then its store holder."""
        groups = list(gen.ranks.values())
        for pgid in groups:
            self._kill_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(r not in gen.exits for r in gen.ranks):
            time.sleep(0.05)
            self._reap()
        killed = sum(1 for r in gen.ranks if r not in gen.exits)
        for pgid in groups:  # also every child of an exited rank (DataLoader workers) still in its session
            self._kill_group(pgid, signal.SIGKILL)
        if gen.store_pid is not None:
            self._kill_group(gen.store_pid, signal.SIGKILL)
        end = time.monotonic() + 2.0
        while time.monotonic() < end and any(r not in gen.exits for r in gen.ranks):
            time.sleep(0.02)
            self._reap()
        gen.ended = True
        self.idle_since = time.time()
        return killed


def _pythonpath(value: str, cwd: str) -> list[str]:
    """The ``sys.path`` entries a fresh interpreter started in ``cwd`` makes of ``PYTHONPATH=value`` (absolute)."""
    return list(dict.fromkeys(os.path.normpath(os.path.join(cwd, p)) for p in value.split(os.pathsep) if p))


def _rank_sys_path(path: list[str], inherited: list[str], wanted: list[str], cwd: str) -> list[str]:
    """``sys.path`` as ``python -m`` in ``cwd`` with the rank's ``PYTHONPATH`` (``wanted``) would start it: the
    agent's own ``PYTHONPATH`` entries (``inherited``, right after ``path[0]``) replaced (``--env PYTHONPATH``)."""
    rest = path[1:]
    if rest[:len(inherited)] == inherited:
        rest = rest[len(inherited):]
    return list(dict.fromkeys([cwd, *wanted, *rest]))


def _fresh_signals() -> None:
    """The signal dispositions a fresh interpreter starts with (a cold rank's): Ctrl-C raises KeyboardInterrupt,
    SIGPIPE and SIGXFSZ are ignored (errors instead of death), everything else is the default."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
                signal.SIGALRM):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def _preload() -> None:
    """What every rank imports anyway, imported once here (no GPU is touched: CUDA initialises lazily).

    Beyond torch and Accelerate: ``torch._dynamo`` (with sympy: ~800 modules), which a cold rank imports at its
    first optimizer step, and DDP. Imports only: no tensor op runs here, so no thread pool exists when ranks fork.
    """
    import accelerate
    import accelerate.commands.launch  # noqa: F401
    import torch
    import torch._dynamo
    import torch.distributed
    import torch.nn.parallel
    import torch.profiler  # noqa: F401

    from nbtrain.bundle import reader  # noqa: F401
    from nbtrain.runtime import checkpoint, hooks, progress, worker  # noqa: F401
    from nbtrain.warm import supervisor  # noqa: F401  (forked for each warm attempt: op "supervise")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or not args[1].isdigit():
        sys.stderr.write("usage: python -m nbtrain.warm.agent GANG_DIR NODE\n")
        return 2
    os.umask(0o077)
    gang_dir, node = Path(args[0]), int(args[1])
    started = time.monotonic()
    _preload()
    print(f"[nbtrain warm agent {node}] ready in {time.monotonic() - started:.1f} s (pid {os.getpid()})", flush=True)
    code = Agent(gang_dir, node).serve()
    sys.stdout.flush()
    os._exit(code)  # no interpreter teardown: with torch._dynamo loaded it takes seconds and nothing needs it


if __name__ == "__main__":
    sys.exit(main())
