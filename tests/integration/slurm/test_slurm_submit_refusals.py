"""Refusals before submission, through ``%%distributed --backend slurm`` on a real 2-node cluster: no Slurm client
on PATH, and a slurm.conf whose controller does not answer, each end the cell with the magic's UsageError naming
the fix; nothing is submitted (no run in the store, no job in Slurm's queue).

Not tested here: an unknown ``--account``/``--qos`` (Slurm refuses it only where accounting, slurmdbd, enforces
associations; this cluster has none: docs/slurm.md says so)."""

from __future__ import annotations

import os
import re
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest
from cluster import Cluster
from IPython.core.error import UsageError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

LINE = "--backend slurm --device cpu --nodes 1 --gpus 1 --no-monitor"


def _nothing_submitted(home: Path, squeue: str, cluster: Cluster) -> None:
    runs = home / "runs"
    assert not runs.is_dir() or not any(runs.iterdir()), sorted(p.name for p in runs.iterdir())
    queue = cluster.client(squeue, "-h", "-o", "%i %j")
    assert queue.returncode == 0 and queue.stdout.strip() == "", (queue.stdout, queue.stderr)


def test_no_slurm_client_on_path_is_refused_with_the_install_command(
        shell: Any, home: Path, slurm_cluster: Cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    squeue = shutil.which("squeue")
    assert squeue is not None
    bare = tmp_path / "bin-without-slurm"
    bare.mkdir()
    path = os.environ["PATH"]
    monkeypatch.setenv("PATH", str(bare))
    with pytest.raises(UsageError) as refused:
        shell.run_cell_magic("distributed", LINE, "x = 1\n")
    said = str(refused.value)
    for words in ("nothing was submitted", "`sbatch` is not on PATH", "apt-get install slurm-client",
                  "module load slurm"):
        assert words in said, (words, said)
    monkeypatch.setenv("PATH", path)  # back for the queue check
    _nothing_submitted(home, squeue, slurm_cluster)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_controller_that_does_not_answer_is_refused_naming_the_checks(
        shell: Any, home: Path, slurm_cluster: Cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # the same cluster's slurm.conf with the controller on a port nothing listens on: slurmctld "stopped" for this
    # client, while the real cluster's queue stays readable for the check that nothing reached it
    conf = tmp_path / "slurm.conf"
    text = re.sub(r"^SlurmctldPort=\d+$", f"SlurmctldPort={_free_port()}", slurm_cluster.conf.read_text(),
                  flags=re.M)
    assert text != slurm_cluster.conf.read_text()
    conf.write_text(text)
    monkeypatch.setenv("SLURM_CONF", str(conf))
    with pytest.raises(UsageError) as refused:
        shell.run_cell_magic("distributed", LINE, "x = 1\n")
    said = str(refused.value)
    for words in ("nothing was submitted", "Slurm controller is not reachable", "scontrol ping", "SLURM_CONF"):
        assert words in said, (words, said)
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    _nothing_submitted(home, shutil.which("squeue") or "squeue", slurm_cluster)
