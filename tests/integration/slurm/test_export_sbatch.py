"""An exported job's ``job.sbatch``, submitted with plain ``sbatch`` on a real 2-node cluster, runs the gang with
no nbtrain importable: both ranks rendezvous at the first node's address and all-reduce."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster import Cluster

from nbtrain.bundle import capture_cell
from nbtrain.export.jobdir import build_job_files, write_job_dir
from nbtrain.export.manifests import Manifests
from nbtrain.export.sbatch import SBATCH_NAME
from nbtrain.spec import JobSpec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

# os._exit after end_training: gloo ranks abort in teardown in some successful runs (DESIGN.md, Facts); nbtrain's
# worker does this for the user, a bare train.py does not, and this test is about the script, not that abort.
CELL = """import os, sys
import torch
from accelerate import Accelerator
acc = Accelerator()
total = acc.reduce(torch.tensor([acc.process_index + 1.0]), "sum").item()
print(f"rank {acc.process_index} of {acc.num_processes} node {os.environ['SLURM_NODEID']} sum {total:.0f}", flush=True)
acc.end_training()
sys.stdout.flush()
os._exit(0)
"""

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
            "DEADLINE"}


def wait_job(cluster: Cluster, job_id: str, timeout: float = 120) -> str:
    """Poll ``scontrol show job -o`` (never ``sbatch --wait``) until the job ends; its JobState."""
    deadline = time.monotonic() + timeout
    while True:
        text = cluster.client("scontrol", "show", "job", "-o", job_id).stdout
        state = re.search(r"JobState=(\S+)", text)
        if state and state.group(1) in TERMINAL:
            return state.group(1)
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job_id], env=cluster.env, timeout=10, check=False)
            raise AssertionError(f"job {job_id} did not end in {timeout:.0f} s: {text}")
        time.sleep(0.2)


def export_job(directory: Path, cell: str, **spec: object) -> Path:
    """Write the job directory of ``cell`` (no Kubernetes manifests: not the subject here)."""
    full = JobSpec(**{"name": "sbatch-test", "device": "cpu", "nodes": 2, "procs_per_node": 1, **spec})  # type: ignore[arg-type]
    bundle = capture_cell(cell, {"__name__": "__main__"})
    files = build_job_files(bundle, full, origin="a test", manifests=Manifests({}, {"job": "not needed here"}))
    return write_job_dir(files, directory)


def no_nbtrain_env(cluster: Cluster, tmp_path: Path) -> dict[str, str]:
    """The cluster's environment with ``import nbtrain`` failing in every Python it starts (a ``sitecustomize`` on
    PYTHONPATH blocks it: the editable install's finder would win over a stub module)."""
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "sitecustomize.py").write_text("import sys\nsys.modules['nbtrain'] = None  # the job must not need it\n")
    return {**cluster.env, "PYTHONPATH": str(stub), "PYTHON": sys.executable}


def test_exported_sbatch_script_runs_the_gang_without_nbtrain(slurm_cluster: Cluster, tmp_path: Path) -> None:
    job_dir = export_job(tmp_path / "job", CELL, partition="debug", time_limit="5")
    env = no_nbtrain_env(slurm_cluster, tmp_path)
    probe = subprocess.run([sys.executable, "-c", "import nbtrain"], env=env, capture_output=True, text=True,
                           timeout=30, check=False)
    assert probe.returncode != 0 and "import of nbtrain halted" in probe.stderr
    submitted = subprocess.run(["sbatch", "--parsable", SBATCH_NAME], cwd=job_dir, env=env, capture_output=True,
                               text=True, timeout=30, check=False)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().split(";")[0]
    state = wait_job(slurm_cluster, job_id)
    out = (job_dir / f"slurm-{job_id}.out").read_text(errors="replace")
    assert state == "COMPLETED", out
    assert "rendezvous 127.0.0.1:" in out  # the first node's NodeAddr, not its name (n1 does not resolve)
    ranks = sorted(re.findall(r"rank (\d) of 2 node (\d) sum 3", out))
    assert ranks == [("0", "0"), ("1", "1")], out  # one rank per node, machine rank = SLURM_NODEID, all-reduced
    assert not os.environ.get("NBTRAIN_PARAMS")
