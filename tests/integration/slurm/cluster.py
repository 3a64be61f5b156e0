"""A real Slurm cluster on this machine: one slurmctld and N slurmd ("nodes"), everything under one directory.

The configuration is DESIGN.md's "Facts" about Slurm: ``AuthType=auth/none`` + ``CredType=cred/none`` (no
munged), every node ``NodeHostname=localhost NodeAddr=127.0.0.1`` with its own ``Port=`` and spool directory,
``proctrack/linuxproc`` + ``task/none`` (no cgroups on CI machines), a 1 s scheduler. Every daemon is started
by this module (``-D``: in the foreground, so its PID is ours). :meth:`Cluster.stop` cancels every job, gives
the jobs' processes :data:`JOBS_END_S` to go and the daemons :data:`DAEMONS_END_S` to answer SIGTERM, then kills
whatever is still there (found by ``SLURM_CONF`` in its environment) and returns it: :func:`test_cluster` fails
the test when that list is not empty, so a leftover (a daemonised task nbtrain missed, a daemon that hangs) is a
test failure, never a silent cleanup. Importable as a plain module: the contract suite's conftest loads it too.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["BINARIES", "DEFAULT_PARTITIONS", "REQUIRE_ENV", "Cluster", "Leftover", "SharedCluster", "missing_binaries",
           "running_cluster", "slurm_pids", "test_cluster"]

BINARIES = ("slurmctld", "slurmd", "sbatch", "srun", "scontrol", "squeue", "scancel", "sinfo")
START_TIMEOUT_S = 20.0
NODE_CPUS = 8  # declared (SlurmdParameters=config_overrides): CPU gangs of 2 x 4 fit on a 2-core machine
JOBS_END_S = 10.0  # scancel -> every task gone: ~0.1 s, plus KillWait=2 for a task that ignores SIGTERM
DAEMONS_END_S = 5.0
REQUIRE_ENV = "NBTRAIN_REQUIRE_SLURM"  # set (CI's .ci/run): a missing Slurm fails the tests instead of skipping them


@dataclass(frozen=True)
class Leftover:
    """A process of the cluster that outlived its deadline at :meth:`Cluster.stop` (and was then SIGKILLed)."""

    pid: int
    what: str  # its command line, or the daemon's name

    def __str__(self) -> str:
        return f"pid {self.pid}: {self.what}"


def missing_binaries() -> list[str]:
    """Slurm programs this machine lacks (empty: a cluster can start)."""
    return [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def slurm_pids(conf: Path) -> list[int]:
    """Live processes whose environment has ``SLURM_CONF=conf`` (daemons, slurmstepd, job tasks, their children)."""
    needle = f"\0SLURM_CONF={conf}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle not in b"\0" + (entry / "environ").read_bytes() + b"\0":
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def render_conf(root: Path, *, nodes: list[str], ports: Mapping[str, int], ctld_port: int,
                partitions: Mapping[str, str], extra: tuple[str, ...] = ()) -> str:
    """slurm.conf of the cluster (``partitions``: name -> extra partition settings; ``extra``: more lines)."""
    lines = [
        "ClusterName=nbtrain-test",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={ports[nodes[0]]}",
        "AuthType=auth/none",
        "CredType=cred/none",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={root}/state",
        f"SlurmdSpoolDir={root}/spool/%n",
        f"SlurmctldPidFile={root}/slurmctld.pid",
        f"SlurmdPidFile={root}/slurmd-%n.pid",
        f"SlurmctldLogFile={root}/slurmctld.log",
        f"SlurmdLogFile={root}/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "MailProg=/bin/true",
        f"PlugStackConfig={root}/plugstack.conf",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SchedulerType=sched/builtin",
        "SchedulerParameters=batch_sched_delay=0,sched_interval=1",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        "SlurmdTimeout=5",
        "KillWait=2",
        "MessageTimeout=5",
        "InactiveLimit=0",
        "MinJobAge=600",
        "JobCompType=jobcomp/none",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "GresTypes=gpu",
        # job ids of clusters running at once never meet (pytest-xdist workers each run one): a test that finds
        # processes by SLURM_JOB_ID finds its own cluster's
        f"FirstJobId={ctld_port * 1000 + 1}",
        *extra,
    ]
    for name in nodes:
        lines.append(f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={ports[name]} "
                     f"CPUs={NODE_CPUS} RealMemory=4000 State=UNKNOWN")
    for i, (name, extra) in enumerate(partitions.items()):
        lines.append(f"PartitionName={name} Nodes={','.join(nodes)} {'Default=YES ' if i == 0 else ''}"
                     f"MaxTime=INFINITE State=UP {extra}".rstrip())
    return "\n".join(lines) + "\n"


@dataclass
class Cluster:
    """A running cluster: its slurm.conf, its daemons (by PID) and the environment its clients need."""

    root: Path
    conf: Path
    nodes: list[str]
    ctld: subprocess.Popen[bytes] | None = None
    slurmds: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    started_in_s: float = 0.0
    leftovers: list[Leftover] = field(default_factory=list)  # what :meth:`stop` had to kill (set by running_cluster)
    altered: bool = False  # a test changed it for good (a killed node): never reused (see SharedCluster)

    @property
    def env(self) -> dict[str, str]:
        """This process's environment pointed at the cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def client(self, *argv: str, timeout: float = 15) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command against the cluster."""
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout)

    def _daemon(self, argv: list[str], log: str) -> subprocess.Popen[bytes]:
        out = open(self.root / log, "ab")
        try:
            return subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        finally:
            out.close()

    def _wait(self, what: str, done: callable, deadline: float) -> None:  # type: ignore[valid-type]
        while not done():
            for name, proc in [("slurmctld", self.ctld), *self.slurmds.items()]:
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode} while waiting for {what}:\n"
                                       + self.log_tail())
            if time.monotonic() > deadline:
                raise RuntimeError(f"the test Slurm cluster did not reach {what} in {START_TIMEOUT_S:.0f} s:\n"
                                   + self.log_tail())
            time.sleep(0.02)

    def start(self) -> Cluster:
        """Start slurmctld, wait for it to answer, start every slurmd, wait for every node to be idle."""
        begin = time.monotonic()
        deadline = begin + START_TIMEOUT_S
        self.ctld = self._daemon(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld.out")
        self._wait("slurmctld answering", lambda: "UP" in self.client("scontrol", "ping", timeout=5).stdout, deadline)
        for name in self.nodes:
            (self.root / "spool" / name).mkdir(parents=True, exist_ok=True)
            self.slurmds[name] = self._daemon(["slurmd", "-D", "-N", name, "-f", str(self.conf)], f"slurmd-{name}.out")
        want = f"idle {len(self.nodes)}"
        self._wait(f"'{want}' nodes", lambda: self.client("sinfo", "-h", "-o", "%T %D").stdout.split("\n")[0].strip()
                   == want, deadline)
        self.started_in_s = time.monotonic() - begin
        return self

    def kill_node(self, name: str, *, with_steps: bool = False) -> None:
        """A node dies: its slurmd and every process of a job step on it (as a power loss would).

        ``with_steps``: its slurmstepd daemons die too, without a word. They are stopped (with slurmd) before any task
        is killed: a slurmstepd that outlived its batch script by a moment reports the script's SIGKILL to slurmctld
        (job FAILED, exit 0:9), which a node that lost its power never does; slurmctld then finds the node silent
        and ends its job as NODE_FAIL. Without it (the default), each step's slurmstepd survives its tasks and reports
        them killed, which is how srun names the node of a multi-node step at once. Tasks are never stopped first: a
        stopped process group orphaned by its launcher's death gets SIGHUP, which a rank would report.
        """
        self.altered = True  # a shared cluster is not handed to the next test (see SharedCluster)
        proc = self.slurmds[name]
        # slurmstepd names itself "slurmstepd: [JOB.STEP]" and has no SLURMD_NODENAME (on one host, the stepds of a
        # 2-node job look alike): found by its step socket in the node's spool directory
        daemons = [proc.pid, *(self._socket_holders(self.root / "spool" / name) if with_steps else ())]
        for pid in daemons:
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError:
                pass
        tasks = []
        for pid in slurm_pids(self.conf):
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes()
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if pid not in daemons and (f"\0SLURMD_NODENAME={name}\0".encode() in b"\0" + env + b"\0" or (
                    b"slurmstepd" in cmd and f"-N\0{name}".encode() in cmd)):
                tasks.append(pid)
        for pid in [*tasks, *daemons]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        proc.wait()

    def _socket_holders(self, directory: Path) -> set[int]:
        """Processes of the cluster holding a Unix socket bound under ``directory``."""
        prefix = f"{directory}/"
        inodes = set()
        for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 8 and fields[7].startswith(prefix):
                inodes.add(f"socket:[{fields[6]}]")
        found = set()
        for pid in slurm_pids(self.conf):
            try:
                links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
            except OSError:
                continue
            if inodes.intersection(links):
                found.add(pid)
        return found

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of every daemon's log (for failure messages)."""
        out = []
        for log in sorted(self.root.glob("*.log")) + sorted(self.root.glob("*.out")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(out)

    def job_processes(self) -> list[Leftover]:
        """Live processes of the cluster other than its daemons: slurmstepd, job tasks and their children."""
        daemons = {p.pid for p in [self.ctld, *self.slurmds.values()] if p is not None}
        found = [Leftover(pid, _cmdline(pid)) for pid in slurm_pids(self.conf) if pid not in daemons]
        return [p for p in found if p.what != ": slurmscriptd"]  # slurmctld's own helper, ends with it

    def clear(self) -> list[Leftover]:
        """Cancel every job and give its processes :data:`JOBS_END_S` to go; SIGKILL and return what outlived that.

        What :meth:`stop` does first, without stopping the daemons: the cluster can serve the next test.
        """
        try:
            self.client("scancel", "--full", "--user", "root", timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        deadline = time.monotonic() + JOBS_END_S
        while self.job_processes() and time.monotonic() < deadline:
            time.sleep(0.05)
        left = self.job_processes()
        for process in left:
            try:
                os.kill(process.pid, signal.SIGKILL)
            except OSError:
                pass
        return left

    def healthy(self, partitions: Mapping[str, str], timeout: float = 15) -> bool:
        """As :meth:`start` left it: every daemon alive, the queue empty, every node idle, ``partitions`` as configured.

        Waits up to ``timeout`` for a job that is completing; False when it does not get there.
        """
        want_states = sorted(f"{name} {'down' if 'State=DOWN' in extra else 'up'}" for name, extra in partitions.items())
        deadline = time.monotonic() + timeout
        while True:
            if self.altered or any(p is None or p.poll() is not None for p in [self.ctld, *self.slurmds.values()]):
                return False
            try:
                queue = self.client("squeue", "-h", timeout=5).stdout.strip()
                nodes = self.client("sinfo", "-h", "-N", "-o", "%N %T", timeout=5).stdout.split("\n")
                shown = self.client("sinfo", "-h", "-o", "%R %a", timeout=5).stdout.split("\n")
            except (OSError, subprocess.TimeoutExpired):
                return False
            idle = {line.split()[0] for line in nodes if line.split()[1:] == ["idle"]}
            if not queue and idle == set(self.nodes) and sorted({x.strip() for x in shown if x.strip()}) == want_states:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)

    def stop(self) -> list[Leftover]:
        """Cancel every job, wait for its processes, stop the daemons; SIGKILL and return what outlived its deadline.

        Empty when every job process was gone :data:`JOBS_END_S` after ``scancel`` and every daemon answered
        SIGTERM within :data:`DAEMONS_END_S`; idempotent.
        """
        survivors: list[Leftover] = []
        if self.ctld is not None and self.ctld.poll() is None:
            try:
                self.client("scancel", "--full", "--user", "root", timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
            deadline = time.monotonic() + JOBS_END_S
            while self.job_processes() and time.monotonic() < deadline:
                time.sleep(0.05)
        daemons = [(f"slurmd -N {name}", proc) for name, proc in self.slurmds.items()] + [("slurmctld", self.ctld)]
        for _, proc in daemons:
            if proc is not None and proc.poll() is None:
                proc.terminate()
        for name, proc in daemons:
            if proc is None:
                continue
            try:
                proc.wait(timeout=DAEMONS_END_S)
            except subprocess.TimeoutExpired:
                survivors.append(Leftover(proc.pid, f"{name} (ignored SIGTERM for {DAEMONS_END_S:.0f} s)"))
                proc.kill()
                proc.wait()
        # slurmstepd and job tasks are not our children: find them by the cluster's SLURM_CONF in their environment
        seen: set[int] = set()
        deadline = time.monotonic() + 5
        while (left := slurm_pids(self.conf)) and time.monotonic() < deadline:
            for pid in left:
                if pid not in seen:
                    seen.add(pid)
                    survivors.append(Leftover(pid, _cmdline(pid)))
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.05)
        return survivors


def _cmdline(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    except OSError:
        return "(gone)"
    return " ".join(a.decode(errors="replace") for a in argv)[:200] or "(no command line)"


@contextmanager
def running_cluster(root: Path, *, nodes: int = 2, partitions: Mapping[str, str] | None = None,
                    extra: tuple[str, ...] = ()) -> Iterator[Cluster]:
    """A started cluster of ``nodes`` nodes under ``root`` (partition ``debug`` by default), stopped on exit."""
    root.mkdir(parents=True, exist_ok=True)
    names = [f"n{i + 1}" for i in range(nodes)]
    ports = _free_ports(nodes + 1)
    conf = root / "slurm.conf"
    (root / "plugstack.conf").write_text("")
    (root / "state").mkdir(exist_ok=True)
    conf.write_text(render_conf(root, nodes=names, ports=dict(zip(names, ports[1:], strict=True)), ctld_port=ports[0],
                                partitions=partitions or {"debug": ""}, extra=extra))
    cluster = Cluster(root, conf, names)
    try:
        yield cluster.start()
    finally:
        cluster.leftovers = cluster.stop()


DEFAULT_PARTITIONS = {"debug": "", "down": "State=DOWN"}  # what the slurm_cluster fixtures start


def _require_slurm() -> None:
    """Skip the test (pytest.skip) with the install command when Slurm is missing; fail it when CI requires Slurm."""
    import pytest

    missing = missing_binaries()
    if missing:
        why = (f"Slurm is not installed ({', '.join(missing)} missing): `apt-get install -y --no-install-recommends "
               "slurmctld slurmd slurm-client` (./dev test does it as root)")
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {why}", pytrace=False)
        pytest.skip(why)


def _fail_on_leftovers(leftovers: list[Leftover], when: str) -> None:
    import pytest

    if leftovers:
        pytest.fail(f"{len(leftovers)} process(es) of the test Slurm cluster outlived their deadline {when} and had "
                    "to be SIGKILLed:\n  " + "\n  ".join(map(str, leftovers)), pytrace=False)


STOP_DEADLINES = (f"({JOBS_END_S:.0f} s after scancel for job processes, {DAEMONS_END_S:.0f} s after SIGTERM for "
                  "daemons)")


@contextmanager
def test_cluster(monkeypatch: object, *, partitions: Mapping[str, str] | None = None,
                 nodes: int = 2, extra: tuple[str, ...] = ()) -> Iterator[Cluster]:
    """A fresh cluster of ``nodes`` nodes (2) for one test, ``SLURM_CONF`` pointing at it.

    For tests that need their own configuration (more nodes, preemption, other partitions, patched daemons); the
    others share one through :class:`SharedCluster`. Skips (pytest.skip) with the install command when Slurm's
    programs are missing, or fails with the same words when ``NBTRAIN_REQUIRE_SLURM=1`` (CI: a Slurm that could
    not be installed must not pass as "skipped"). Fails at teardown when a process of the cluster outlived
    :meth:`Cluster.stop`'s deadlines (listed by PID and command line). The cluster lives under a short /tmp
    directory: slurmd's step sockets (``SPOOL/n1_<job>.<step>``) must fit in 108 bytes.
    """
    import tempfile

    _require_slurm()
    from nbtrain.backends.slurm import cli

    root = Path(tempfile.mkdtemp(prefix="nbslurm-", dir="/tmp"))
    try:
        with running_cluster(root, nodes=nodes, partitions=partitions or DEFAULT_PARTITIONS,
                             extra=extra) as cluster:
            monkeypatch.setenv("SLURM_CONF", str(cluster.conf))  # type: ignore[attr-defined]
            cli._cache = None  # job ids start again at 1 on every cluster: never read another cluster's records
            yield cluster
        _fail_on_leftovers(cluster.leftovers, STOP_DEADLINES)
    finally:
        cli._cache = None
        shutil.rmtree(root, ignore_errors=True)


class SharedCluster:
    """The default 2-node cluster (partitions ``debug`` and ``down``), started once and lent to one test at a time.

    One per process (each pytest-xdist worker has its own, on its own ports and directory). Between tests,
    :meth:`lend` cancels every job and fails the test whose job processes outlived :data:`JOBS_END_S` (as
    :meth:`Cluster.stop` would); a cluster that is not as :meth:`Cluster.start` left it afterwards (a killed node,
    a daemon gone, a partition left changed, a node that does not come back to idle) is stopped, with the same
    leftover check, and the next test gets a fresh one. Job ids keep counting across the tests of a cluster:
    tests find their jobs by what they submitted, never by number.
    """

    def __init__(self) -> None:
        self._cluster: Cluster | None = None
        self._context: Any = None
        self._root: Path | None = None

    @contextmanager
    def lend(self, monkeypatch: object) -> Iterator[Cluster]:
        """The cluster for one test, ``SLURM_CONF`` pointing at it; skips or fails like :func:`test_cluster`."""
        _require_slurm()
        from nbtrain.backends.slurm import cli

        cluster = self._cluster or self._start()
        monkeypatch.setenv("SLURM_CONF", str(cluster.conf))  # type: ignore[attr-defined]
        cli._cache = None  # never read the records of the test before
        try:
            yield cluster
        finally:
            cli._cache = None
            leftovers = cluster.clear()
            if not cluster.healthy(DEFAULT_PARTITIONS):
                leftovers += self.close()
        _fail_on_leftovers(leftovers, f"({JOBS_END_S:.0f} s after scancel at the end of the test)")

    def _start(self) -> Cluster:
        import tempfile

        self._root = Path(tempfile.mkdtemp(prefix="nbslurm-", dir="/tmp"))
        self._context = running_cluster(self._root, partitions=DEFAULT_PARTITIONS)
        try:
            self._cluster = self._context.__enter__()
        except BaseException:
            self._context = None
            shutil.rmtree(self._root, ignore_errors=True)
            raise
        return self._cluster

    def close(self) -> list[Leftover]:
        """Stop the cluster (if one runs) and remove its directory; what :meth:`Cluster.stop` had to kill."""
        cluster, context, self._cluster, self._context = self._cluster, self._context, None, None
        if cluster is None or context is None:
            return []
        try:
            context.__exit__(None, None, None)
        finally:
            if self._root is not None:
                shutil.rmtree(self._root, ignore_errors=True)
        return cluster.leftovers


SHARED = SharedCluster()  # this process's; the conftests that lend it import this module under one name ("cluster")


def shared_cluster_session() -> Iterator[None]:
    """The body of a session fixture: at the end, stop :data:`SHARED`, failing on what had to be killed."""
    yield
    _fail_on_leftovers(SHARED.close(), STOP_DEADLINES)
