"""--accelerate-config on Slurm: the plan's notice names what came from the team's file and the rule for strategy
flags, the same words as the local backend (nbtrain.backends.accelerate_config.team_notice), on a real cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from cluster import Cluster

from nbtrain.backends.accelerate_config import TEAM_RULE
from nbtrain.backends.slurm import SlurmBackend
from nbtrain.bundle import capture_cell
from nbtrain.spec import JobSpec
from nbtrain.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_the_team_files_keys_and_the_rule_are_in_the_slurm_plans_notice(
        home: Path, slurm_cluster: Cluster, tmp_path: Path) -> None:
    team = tmp_path / "team.yaml"
    team.write_text("debug: true\nnum_processes: 7\n")
    backend = SlurmBackend(Store(home))
    bundle = capture_cell("1\n", {"__name__": "__main__"})
    directory = bundle.write(tmp_path / "bundle")
    spec = JobSpec(backend="slurm", device="cpu", nodes=1, procs_per_node=1, accelerate_config=str(team))
    plan = backend.plan(spec, str(directory), bundle.digest, "teamcfg-000001")
    notice = next(n for n in plan.notices if n.startswith(f"--accelerate-config {team}"))
    assert "used debug from your file" in notice, notice  # num_processes is the gang's shape: nbtrain keeps it
    assert TEAM_RULE in notice, notice
