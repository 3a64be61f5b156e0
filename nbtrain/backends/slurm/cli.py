"""The only module that runs Slurm's commands (argv lists, bounded timeouts, ``SLURM_CONF`` honoured).

Every failure becomes an nbtrain error that quotes Slurm's own words: no client installed or no controller
reachable -> EnvironmentProblem; a request Slurm refuses (unknown partition, account or QOS, more nodes than
the partition has) -> SpecError; anything else -> BackendError. Job records are read with one
``scontrol show job -o`` for every job at once, at most once per :data:`JOB_CACHE_S` per process, so any
number of runs followed by one kernel cost one query per second (never ``sbatch --wait``'s polling).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time

from nbtrain.backends.slurm.jobstate import JobInfo, parse_jobs
from nbtrain.errors import BackendError, EnvironmentProblem, SpecError

__all__ = [
    "JOB_CACHE_S",
    "cancel",
    "first_node",
    "jobs",
    "node_address",
    "partition_has_gpus",
    "probe",
    "require_client",
    "run",
    "sbatch",
    "test_only",
]

TIMEOUT_S = 20.0  # a client whose SLURM_CONF is missing retries for 59 s: never wait that long
JOB_CACHE_S = 1.0
_lock = threading.Lock()
_cache: tuple[float, dict[str, JobInfo]] | None = None


def require_client(program: str = "sbatch") -> str:
    """The path of ``program``; EnvironmentProblem with the fix when Slurm's client is not installed."""
    path = shutil.which(program)
    if path is None:
        raise EnvironmentProblem(
            f"--backend slurm: the Slurm client `{program}` is not on PATH; install it (Debian/Ubuntu: `apt-get "
            "install slurm-client`, or your site's module: `module load slurm`) on the machine that runs the kernel.")
    return path


def run(argv: list[str], *, timeout: float = TIMEOUT_S, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a Slurm client command; EnvironmentProblem when it is missing, cannot reach the controller or hangs."""
    require_client(argv[0])
    conf = os.environ.get("SLURM_CONF")
    if conf and not os.path.exists(conf):
        raise EnvironmentProblem(f"SLURM_CONF={conf} does not exist; point it at your cluster's slurm.conf or unset it.")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=stdin,
                              stdin=None if stdin is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired as error:
        raise EnvironmentProblem(f"`{' '.join(argv[:3])}` did not answer in {timeout:.0f} s: the Slurm controller is "
                                 "not reachable (check `scontrol ping` and SLURM_CONF).") from error
    if done.returncode != 0 and _unreachable(done.stderr):
        raise EnvironmentProblem(f"the Slurm controller is not reachable: {_said(done.stderr)}; check `scontrol "
                                 "ping`, slurmctld and SLURM_CONF.")
    return done


def _said(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return "; ".join(lines[-3:]) or "(no message)"


def _unreachable(stderr: str) -> bool:
    text = stderr.lower()
    return any(s in text for s in ("unable to contact slurm controller", "connection refused",
                                   "could not establish a configuration source", "communication connection failure"))


def test_only(argv_options: list[str], script: str) -> str:
    """``sbatch --test-only``: Slurm's own reason when it would never run the request (SpecError), else its answer."""
    done = run(["sbatch", "--test-only", *argv_options], stdin=script)
    if done.returncode != 0:
        raise SpecError(f"--backend slurm: Slurm refuses this job: {_said(done.stderr)}; check --partition/--account/"
                        "--qos/--nodes/--gpus/--constraint against `sinfo` and `sacctmgr show assoc`.")
    return _said(done.stderr)


def sbatch(script_path: str) -> str:
    """Submit a batch script (its options are its #SBATCH lines); the job id."""
    done = run(["sbatch", "--parsable", script_path])
    if done.returncode != 0:
        raise BackendError(f"sbatch refused {script_path}: {_said(done.stderr)}")
    return done.stdout.strip().split(";")[0]


def jobs(*, fresh: bool = False) -> dict[str, JobInfo]:
    """Every job slurmctld still knows, by id (cached :data:`JOB_CACHE_S` s across all callers of this process)."""
    global _cache
    with _lock:
        if not fresh and _cache is not None and time.monotonic() - _cache[0] < JOB_CACHE_S:
            return _cache[1]
        done = run(["scontrol", "show", "job", "-o"])
        if done.returncode != 0 and "no jobs in the system" not in done.stdout.lower() + done.stderr.lower():
            raise BackendError(f"`scontrol show job -o` failed: {_said(done.stderr)}")
        found = parse_jobs(done.stdout)
        _cache = (time.monotonic(), found)
        return found


def cancel(job_id: str, *, signal_name: str | None = None) -> None:
    """``scancel`` the job (a job already gone is not an error)."""
    argv = ["scancel", *(["--signal", signal_name] if signal_name else []), job_id]
    done = run(argv)
    if done.returncode != 0 and "invalid job id" not in done.stderr.lower() and "already completing" not in \
            done.stderr.lower():
        raise BackendError(f"`scancel {job_id}` failed: {_said(done.stderr)}")


def first_node(nodelist: str) -> str:
    """The first node name of a Slurm node list (``n[1-2]`` -> ``n1``)."""
    done = run(["scontrol", "show", "hostnames", nodelist])
    names = done.stdout.split()
    if done.returncode != 0 or not names:
        raise BackendError(f"`scontrol show hostnames {nodelist}` failed: {_said(done.stderr)}")
    return names[0]


def node_address(node: str) -> str:
    """The address Slurm reaches ``node`` at (its NodeAddr: node names need not resolve as host names)."""
    done = run(["sinfo", "-h", "-N", "-n", node, "-o", "%o"])
    addresses = done.stdout.split()
    if done.returncode != 0 or not addresses:
        raise BackendError(f"could not read the address of node {node} (`sinfo -N -n {node} -o %o`): "
                           f"{_said(done.stderr)}")
    return addresses[0]


def partition_has_gpus(partition: str | None) -> bool:
    """Some node of ``partition`` (default: the default partition) declares GPUs (a ``gpu`` GRES)."""
    argv = ["sinfo", "-h", "-o", "%G"] + (["-p", partition] if partition else [])
    done = run(argv)
    return done.returncode == 0 and "gpu" in done.stdout


def probe(argv: list[str], *, timeout: float) -> str | None:
    """Run a probe step (:func:`nbtrain.backends.slurm.script.probe_argv`): None when it succeeded, else what
    srun said (or that it did not answer in ``timeout`` s)."""
    try:
        done = run(argv, timeout=timeout)
    except EnvironmentProblem as error:
        return str(error)
    return None if done.returncode == 0 else _said(done.stderr)
