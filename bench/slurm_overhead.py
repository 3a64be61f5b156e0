"""Launch overhead on Slurm (``python bench/launch_overhead.py --backend slurm``): nbtrain vs ``sbatch job.sbatch``.

Starts the test suite's real 2-node cluster (tests/integration/slurm/cluster.py, imported by path; ended by PID
with zero leftovers), then alternates, ``--repeats`` times:

- nbtrain: the time from running ``%%distributed --backend slurm --nodes 2 --gpus 2 --device cpu`` in a real
  IPython shell (capture, plan with ``sbatch --test-only``, sbatch, supervisor, srun, launchers, workers) to the
  first training step finished on ALL 4 ranks;
- bare: the same cell exported once (``job.sbatch`` next to train.py, no nbtrain in the job), from ``sbatch`` to
  the same point.

Each job is waited for (``scontrol show job -o``) and then its nodes (``sinfo``: idle again) before the next starts,
so the two never share the nodes and neither waits for the other's clean-up. Prints
the medians and the ratio; the exit status is 1 when the ratio misses the target (<= 1.10).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from launch_overhead import BODY, SETUP, TARGET, _first_step_done

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_PY = ROOT / "tests" / "integration" / "slurm" / "cluster.py"
FLAGS = "--backend slurm --nodes 2 --gpus 2 --device cpu --name bench --out run"
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL")


def load_cluster_module() -> ModuleType:
    """tests/integration/slurm/cluster.py as a module (the fixture the tests use, not a copy)."""
    spec = importlib.util.spec_from_file_location("nbtrain_bench_slurm_cluster", CLUSTER_PY)
    assert spec is not None and spec.loader is not None, CLUSTER_PY
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module by name
    spec.loader.exec_module(module)
    return module


def wait_job_end(cluster: Any, job_id: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = cluster.client("scontrol", "show", "job", "-o", job_id).stdout
        found = re.search(r"JobState=(\S+)", text)
        if found and found.group(1) in ENDED:
            return found.group(1)
        time.sleep(0.1)
    raise TimeoutError(f"Slurm job {job_id} did not end within {timeout} s")


def wait_nodes_idle(cluster: Any, timeout: float = 60) -> None:
    """Until every node is idle again (a job that ended leaves its nodes COMPLETING for a moment: a job submitted
    then waits for Slurm's next scheduling pass, a second or more, whichever side of the bench it is)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = cluster.client("sinfo", "-h", "-N", "-o", "%T").stdout.split()
        if states and all(state == "idle" for state in states):
            return
        time.sleep(0.1)
    raise TimeoutError(f"the Slurm nodes did not become idle within {timeout} s")


def run_nbtrain(shell: Any, bench_dir: Path) -> float:
    os.environ["BENCH_DIR"] = str(bench_dir)  # sbatch --export=ALL carries it to the ranks
    start = time.time()
    result = shell.run_cell(f"%%distributed {FLAGS}\n{BODY}", store_history=True)  # export reads In
    if result.error_before_exec or result.error_in_exec:
        raise RuntimeError(result.error_before_exec or result.error_in_exec)
    done = _first_step_done(bench_dir, 4)
    run = shell.user_ns["run"]
    state = run.wait(timeout=120, progress=False)
    if state.value != "succeeded":
        raise RuntimeError(f"the nbtrain run ended {state.value}:\n{run.summary()}")
    return done - start


def export_job(shell: Any, out: Path) -> Path:
    """The last %%distributed cell as a job directory (untimed; Kubernetes manifests skipped)."""
    from nbtrain.export.live import export_live
    from nbtrain.export.manifests import Manifests

    return export_live(shell.user_ns, list(shell.user_ns["In"]), transform=shell.transform_cell, out=out,
                       manifests=Manifests({}, {"job": "not needed by the bench"})).directory


def run_bare(cluster: Any, job_dir: Path, bench_dir: Path) -> float:
    env = {**cluster.env, "BENCH_DIR": str(bench_dir), "PYTHON": sys.executable}
    start = time.time()
    done = subprocess.run(["sbatch", "--parsable", "job.sbatch"], cwd=job_dir, env=env, capture_output=True,
                          text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"sbatch job.sbatch failed: {done.stderr.strip()}")
    first = _first_step_done(bench_dir, 4)
    job_id = done.stdout.strip().split(";")[0]
    state = wait_job_end(cluster, job_id)
    if state != "COMPLETED":
        log = (job_dir / f"slurm-{job_id}.out").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"job.sbatch ended {state}:\n{log}")
    return first - start


def main_slurm(repeats: int) -> int:
    """The Slurm mode (see the module docstring); the exit status."""
    cluster_mod = load_cluster_module()
    missing = cluster_mod.missing_binaries()
    if missing:
        print(f"Slurm is not installed ({', '.join(missing)} missing): apt-get install -y --no-install-recommends "
              "slurmctld slurmd slurm-client", file=sys.stderr)
        return 2
    from scratch import scratch_home  # bench/ is on sys.path when a bench runs

    scratch_home("nbtrain-bench-")
    os.environ["NBTRAIN_TRACKING"] = os.environ.get("NBTRAIN_TRACKING", "0")
    root = Path(tempfile.mkdtemp(prefix="nbslurm-", dir="/tmp"))  # short: slurmd's socket paths must fit
    ours: list[float] = []
    bare: list[float] = []
    try:
        with cluster_mod.running_cluster(root) as cluster, tempfile.TemporaryDirectory() as tmp:
            os.environ["SLURM_CONF"] = str(cluster.conf)
            print(f"Slurm cluster: 2 nodes up in {cluster.started_in_s:.2f} s ({cluster.conf})", flush=True)
            from IPython.core.interactiveshell import InteractiveShell

            shell = InteractiveShell.instance()
            shell.run_line_magic("load_ext", "nbtrain")
            shell.run_cell(SETUP, store_history=True)
            job_dir: Path | None = None
            for i in range(repeats):
                d1 = Path(tmp) / f"nb{i}"
                d1.mkdir()
                wait_nodes_idle(cluster)
                ours.append(run_nbtrain(shell, d1))
                if job_dir is None:
                    job_dir = export_job(shell, Path(tmp) / "job")
                d2 = Path(tmp) / f"bare{i}"
                d2.mkdir()
                wait_nodes_idle(cluster)
                bare.append(run_bare(cluster, job_dir, d2))
                print(f"  round {i + 1}: nbtrain {ours[-1]:.2f} s   sbatch job.sbatch {bare[-1]:.2f} s", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    m_ours, m_bare = statistics.median(ours), statistics.median(bare)
    ratio = m_ours / m_bare
    print(f"submit -> first step done on all 4 ranks (2 Slurm nodes x 2 CPU processes), median of {repeats}:")
    print(f"  nbtrain --backend slurm: {m_ours:.2f} s")
    print(f"  sbatch job.sbatch      : {m_bare:.2f} s")
    print(f"  ratio                  : {ratio:.3f}  (target <= {TARGET:.2f}: {'met' if ratio <= TARGET else 'NOT met'})")
    return 0 if ratio <= TARGET else 1
