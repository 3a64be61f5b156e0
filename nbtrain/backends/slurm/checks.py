"""``nbtrain doctor``'s Slurm checks: the client, the controller, and the store as the compute nodes see it.

Each check is one :class:`nbtrain.doctor.Check` (OK/FAIL, the value, the fix). The store check is real: a probe
file with a random token is written into ``NBTRAIN_HOME`` here, and a one-task-per-node ``srun`` (at most
:data:`PROBE_NODES` nodes of the partition, ``--immediate`` so a busy cluster answers instead of queueing) reads
it back on the nodes, with the Python the jobs will run (``NBTRAIN_PYTHON``, default this interpreter). Every
command has a short timeout: a client without a readable ``SLURM_CONF`` retries for 59 s otherwise.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import sys
from pathlib import Path

from nbtrain.backends.slurm import cli
from nbtrain.doctor import Check
from nbtrain.errors import NbtrainError
from nbtrain.store import Store

__all__ = ["CLIENTS", "PROBE_NODES", "parse_probe", "slurm_checks"]

CLIENTS = ("sbatch", "srun", "scontrol", "sinfo", "squeue", "scancel")
PROBE_NODES = 2
PING_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 40.0
IMMEDIATE_S = 20
_SHARED_FIX = ("put NBTRAIN_HOME on a filesystem every node mounts at the same path (e.g. `export "
               "NBTRAIN_HOME=/shared/$USER/nbtrain`, /shared being your cluster's NFS/Lustre/GPFS mount) and run the "
               "kernel with it")


def slurm_checks(store: Store | None = None, *, partition: str | None = None, python: str | None = None) -> list[Check]:
    """The Slurm checks, in order; later ones are skipped (and say why) when an earlier one fails."""
    missing = [c for c in CLIENTS if shutil.which(c) is None]
    if missing:
        return [Check("slurm client", False, f"not on PATH: {', '.join(missing)}",
                      "install Slurm's client (Debian/Ubuntu: `apt-get install slurm-client`) or `module load slurm`")]
    checks = [Check("slurm client", True, f"{', '.join(CLIENTS)} in {Path(shutil.which('sbatch') or '').parent}")]
    controller = _ping()
    checks.append(controller)
    if not controller.ok:
        checks.append(Check("slurm store", False, "not checked: no controller", "fix the controller first"))
        return checks
    checks.append(_store_check(store or Store(), partition, python or os.environ.get("NBTRAIN_PYTHON")
                               or sys.executable))
    return checks


def _ping() -> Check:
    conf = os.environ.get("SLURM_CONF", "")
    where = f"SLURM_CONF={conf}" if conf else "SLURM_CONF unset (the client's default configuration)"
    fix = ("start slurmctld or point SLURM_CONF at your cluster's slurm.conf; `scontrol ping` must say UP")
    try:
        done = cli.run(["scontrol", "ping"], timeout=PING_TIMEOUT_S)
    except NbtrainError as error:
        return Check("slurm controller", False, f"{where}: {error}", fix)
    said = " ".join(done.stdout.split()) or " ".join(done.stderr.split()) or "(no answer)"
    if done.returncode == 0 and " UP" in said and "DOWN" not in said:
        return Check("slurm controller", True, said)
    return Check("slurm controller", False, f"{where}: {said}", fix)


def parse_probe(output: str, token: str, python: str) -> tuple[list[str], list[str], list[str]]:
    """Nodes that read the token, nodes that did not, nodes without ``python`` (from the probe step's output).

    Each task prints ``NODE <token or ->`` and ``NODE python:yes|no`` (pure).
    """
    read, unread, no_python = [], [], []
    for line in output.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        node, value = parts
        if value == "python:no":
            no_python.append(node)
        elif value.startswith("python:"):
            continue
        elif value == token:
            read.append(node)
        else:
            unread.append(node)
    return sorted(set(read)), sorted(set(unread) - set(read)), sorted(set(no_python))


def _probe_nodes(partition: str | None) -> int:
    done = cli.run(["sinfo", "-h", "-o", "%D", *(["-p", partition] if partition else [])], timeout=PING_TIMEOUT_S)
    total = sum(int(n) for n in done.stdout.split() if n.isdigit())
    return max(1, min(PROBE_NODES, total))


def _store_check(store: Store, partition: str | None, python: str) -> Check:
    name = "slurm store"
    root = store.root
    try:
        store.ensure_writable()
        probe_dir = root / "tmp"
        probe_dir.mkdir(parents=True, exist_ok=True)
        token = secrets.token_hex(8)
        probe = probe_dir / f"doctor-{token}"
        probe.write_text(token + "\n")
    except (OSError, NbtrainError) as error:
        return Check(name, False, f"{root}: cannot write a probe file ({error})", "set NBTRAIN_HOME to a writable "
                     "directory on a filesystem every node mounts")
    try:
        nodes = _probe_nodes(partition)
        task = (f"echo \"$SLURMD_NODENAME $(cat {shlex.quote(str(probe))} 2>/dev/null || echo -)\"; "
                f"if test -x {shlex.quote(python)}; then echo \"$SLURMD_NODENAME python:yes\"; "
                f"else echo \"$SLURMD_NODENAME python:no\"; fi")
        argv = ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", f"--immediate={IMMEDIATE_S}",
                "--time=1", "--job-name=nbtrain-doctor", *([f"--partition={partition}"] if partition else []),
                "sh", "-c", task]
        done = cli.run(argv, timeout=PROBE_TIMEOUT_S)
    except NbtrainError as error:
        return Check(name, False, f"{root}: the probe step did not run ({error})", "check `sinfo` for idle nodes")
    finally:
        probe.unlink(missing_ok=True)
    read, unread, no_python = parse_probe(done.stdout, token, python)
    where = f" (partition {partition})" if partition else ""
    if done.returncode != 0 and not (read or unread):
        said = " ".join(done.stderr.split())[-300:] or f"exit status {done.returncode}"
        return Check(name, False, f"{root}: the probe step{where} failed: {said}",
                     "free or resume a node (`sinfo`), or pass --partition with idle nodes")
    if unread or not read:
        return Check(name, False, f"NBTRAIN_HOME={root} is NOT shared: node(s) {', '.join(unread) or '?'} cannot "
                     "read a file written here", _SHARED_FIX)
    if no_python:
        return Check(name, False, f"{root} is shared with {', '.join(read)}, but {python} is missing on "
                     f"{', '.join(no_python)}", "set NBTRAIN_PYTHON to a Python (with torch and accelerate) every "
                     "node reaches at the same path, e.g. a venv on the shared filesystem")
    return Check(name, True, f"NBTRAIN_HOME={root} read back on node(s) {', '.join(read)}{where}; {python} present")
