"""``nbtrain doctor --backend slurm`` on a real cluster (every Slurm check OK, the store read back on both nodes)
and without one (a clear FAIL with the fix, in bounded time)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cluster import Cluster, missing_binaries, render_conf

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def doctor(env: dict[str, str], *args: str, cwd: Path | None = None) -> tuple[int, dict[str, dict[str, Any]], float]:
    """Run ``nbtrain doctor --json ARGS``; exit status, checks by name, seconds it took."""
    begin = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "nbtrain", "doctor", "--json", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=90, check=False)
    took = time.monotonic() - begin
    assert done.stdout.strip(), done.stderr
    return done.returncode, {c["name"]: c for c in json.loads(done.stdout)}, took


def test_doctor_passes_on_a_running_cluster(slurm_cluster: Cluster, home: Path) -> None:
    env = {**slurm_cluster.env, "NBTRAIN_HOME": str(home)}
    _, checks, _ = doctor(env, "--backend", "slurm")
    for name in ("slurm client", "slurm controller", "slurm store"):
        assert checks[name]["ok"], checks[name]
    assert "UP" in checks["slurm controller"]["detail"]
    assert "read back on node(s) n1, n2" in checks["slurm store"]["detail"]
    assert not list((home / "tmp").glob("doctor-*"))  # the probe file is removed
    assert "doctor" not in slurm_cluster.client("squeue", "-h", "-o", "%j").stdout  # its step is over


def test_nbtrain_toml_selecting_slurm_turns_the_checks_on(slurm_cluster: Cluster, home: Path, tmp_path: Path) -> None:
    (tmp_path / "nbtrain.toml").write_text('[job]\nbackend = "slurm"\n\n[slurm]\npartition = "debug"\n')
    env = {**slurm_cluster.env, "NBTRAIN_HOME": str(home)}
    _, checks, _ = doctor(env, cwd=tmp_path)
    assert checks["slurm store"]["ok"] and "(partition debug)" in checks["slurm store"]["detail"]


def test_no_controller_is_a_clear_fail_in_bounded_time(tmp_path: Path, home: Path) -> None:
    if missing_binaries():
        pytest.skip("Slurm is not installed")
    conf = tmp_path / "slurm.conf"  # a cluster whose daemons were never started (ports nobody listens on)
    conf.write_text(render_conf(tmp_path, nodes=["n1"], ports={"n1": 1}, ctld_port=9, partitions={"debug": ""}))
    import os

    env = {**os.environ, "SLURM_CONF": str(conf), "NBTRAIN_HOME": str(home)}
    code, checks, took = doctor(env, "--backend", "slurm")
    assert code != 0 and took < 40, took
    ctl = checks["slurm controller"]
    assert not ctl["ok"] and str(conf) in ctl["detail"] and "slurmctld" in ctl["fix"], ctl
    assert not checks["slurm store"]["ok"] and "no controller" in checks["slurm store"]["detail"]

    env["SLURM_CONF"] = str(tmp_path / "missing.conf")  # the client would retry for 59 s: doctor answers at once
    code, checks, took = doctor(env, "--backend", "slurm")
    assert code != 0 and took < 20, took
    assert "does not exist" in checks["slurm controller"]["detail"]


def test_no_slurm_client_is_a_fail_with_the_install_command(tmp_path: Path, home: Path) -> None:
    import os

    empty = tmp_path / "bin"
    empty.mkdir()
    env = {**os.environ, "PATH": str(empty), "NBTRAIN_HOME": str(home)}
    code, checks, took = doctor(env, "--backend", "slurm")
    assert code != 0 and took < 40
    client = checks["slurm client"]
    assert not client["ok"] and "sbatch" in client["detail"] and "apt-get install slurm-client" in client["fix"]
    assert "slurm controller" not in checks  # nothing else is tried without a client
