"""The test cluster's own promise: a process of it that outlives the teardown's deadline is reported, not hidden.

Every Slurm test relies on it (``test_cluster`` fails the test on a non-empty :meth:`Cluster.stop`), so a
daemonised task nbtrain fails to end shows up as a failure of the test that left it.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest
from cluster import missing_binaries, running_cluster, slurm_pids

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_stop_reports_and_kills_a_task_that_daemonised_and_nothing_else() -> None:
    if missing_binaries():
        pytest.skip(f"Slurm is not installed ({', '.join(missing_binaries())} missing)")
    root = Path(tempfile.mkdtemp(prefix="nbslurm-", dir="/tmp"))
    try:
        with running_cluster(root) as cluster:
            # outside nbtrain: a batch job whose task leaves a setsid'd sleep behind (proctrack/linuxproc loses it)
            done = cluster.client("sbatch", "--parsable", "--output=/dev/null", "--wrap", "setsid -f sleep 300; sleep 300")
            assert done.returncode == 0, done.stderr
            deadline = time.monotonic() + 20
            while not [p for p in cluster.job_processes() if p.what == "sleep 300"]:
                assert time.monotonic() < deadline, f"the job never started: {cluster.job_processes()}"
                time.sleep(0.1)
        assert [p.what for p in cluster.leftovers] == ["sleep 300"], cluster.leftovers
        assert slurm_pids(cluster.conf) == [], "stop() left a process of the cluster alive"
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize(("required", "outcome"), [("1", pytest.fail.Exception), ("", pytest.skip.Exception)])
def test_a_missing_slurm_fails_the_tests_when_ci_requires_it_and_skips_them_otherwise(
        monkeypatch: pytest.MonkeyPatch, required: str, outcome: type[BaseException]) -> None:
    import cluster

    monkeypatch.setattr(cluster, "missing_binaries", lambda: ["slurmctld"])
    monkeypatch.setenv(cluster.REQUIRE_ENV, required)
    with pytest.raises(outcome, match=r"Slurm is not installed \(slurmctld missing\): `apt-get install"):
        with cluster.test_cluster(monkeypatch):
            pass
