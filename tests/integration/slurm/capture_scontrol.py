"""Regenerates tests/data/slurm/scontrol_show_job.txt: real ``scontrol show job -o`` lines from the test cluster.

Run as root on a machine with Slurm (about two minutes: Slurm enforces a one-minute time limit every ~30 s)::

    python tests/integration/slurm/capture_scontrol.py tests/data/slurm/scontrol_show_job.txt

The jobs, by name: ``timeout`` (1 min limit, TIMEOUT), ``nodefail`` (2 nodes, n2's slurmd killed: NODE_FAIL;
``--no-requeue``, else Slurm requeues a batch job after a node failure), ``running``, ``completed``, ``failed``
(exit 3), ``cancelled`` (scancel), and in the DOWN partition ``down``, submitted in this order: ``pending-older``
(priority 300), ``pending-low`` (100), ``pending-high`` (300).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from cluster import running_cluster


def main(out: Path) -> None:
    root = Path(tempfile.mkdtemp(prefix="nbslurm-", dir="/tmp"))
    with running_cluster(root, partitions={"debug": "", "down": "State=DOWN"}) as cluster:
        def sbatch(name: str, *argv: str) -> str:
            done = cluster.client("sbatch", "--parsable", f"--job-name={name}", "--output=/dev/null", *argv)
            assert done.returncode == 0, done.stderr
            return done.stdout.strip()

        def state(job_id: str) -> str:
            text = cluster.client("scontrol", "show", "job", "-o", job_id).stdout
            return text.split("JobState=", 1)[1].split()[0] if "JobState=" in text else "?"

        def wait(job_id: str, want: str, timeout: float = 150) -> None:
            deadline = time.monotonic() + timeout
            while state(job_id) != want:
                assert time.monotonic() < deadline, f"job {job_id} is {state(job_id)}, never {want}"
                time.sleep(0.5)

        older = sbatch("pending-older", "-p", "down", "--wrap", "true")
        low = sbatch("pending-low", "-p", "down", "--wrap", "true")
        high = sbatch("pending-high", "-p", "down", "--wrap", "true")
        for job_id, priority in ((older, 300), (low, 100), (high, 300)):
            cluster.client("scontrol", "update", f"JobId={job_id}", f"Priority={priority}")
        timeout = sbatch("timeout", "--time=1", "--nodelist=n1", "--wrap", "sleep 300")
        running = sbatch("running", "--nodelist=n1", "--wrap", "sleep 300")
        nodefail = sbatch("nodefail", "-N2", "--no-requeue", "--wrap", "srun sleep 300")
        completed = sbatch("completed", "--nodelist=n1", "--wrap", "true")
        failed = sbatch("failed", "--nodelist=n1", "--wrap", "exit 3")
        cancelled = sbatch("cancelled", "--nodelist=n1", "--wrap", "sleep 300")
        for job_id in (running, nodefail, cancelled):
            wait(job_id, "RUNNING")
        time.sleep(1)  # srun's step is up on both nodes
        cluster.client("scancel", cancelled)
        cluster.kill_node("n2")
        for job_id, want in ((completed, "COMPLETED"), (failed, "FAILED"), (cancelled, "CANCELLED"),
                             (nodefail, "NODE_FAIL"), (timeout, "TIMEOUT")):
            wait(job_id, want)
        version = cluster.client("scontrol", "--version").stdout.strip()  # needs a slurm.conf, like every client
        lines = cluster.client("scontrol", "show", "job", "-o").stdout
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"# captured from {version} (Debian 12 packages) on the 2-node test cluster by "
                   "tests/integration/slurm/capture_scontrol.py\n" + lines)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
