"""``--accelerate-config FILE``: what the team's file decides is named in the notice and in ``--dry-run``, and the
rule where a strategy option meets the file is the one the notice states (a value equal to nbtrain's default is
not "given": the spec holds values, not where they came from)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nbtrain.backends import extras
from nbtrain.backends.accelerate_config import TEAM_RULE, accelerate_config, read_team_config, team_notice
from nbtrain.backends.local import LocalBackend
from nbtrain.backends.local import backend as local_backend
from nbtrain.backends.local.gpus import GpuInventory
from nbtrain.bundle import capture_cell
from nbtrain.spec import JobSpec
from nbtrain.store import Store


@pytest.fixture
def team(tmp_path: Path) -> Path:
    path = tmp_path / "team.yaml"
    path.write_text("debug: true\nnum_processes: 64\ndeepspeed_config:\n  zero_stage: 3\n  offload_optimizer_device: cpu\n")
    return path


def _deepspeed(team: Path, **fields: object) -> tuple[dict[str, object], dict[str, str]]:
    spec = JobSpec(procs_per_node=2, strategy="deepspeed", **fields)  # type: ignore[arg-type]
    return accelerate_config(spec, use_gpu=True, main_address="10.0.0.1", main_port=29500,
                             team=read_team_config(str(team)))


def test_a_strategy_option_at_its_default_leaves_the_files_value_and_the_notice_says_so(team: Path) -> None:
    config, source = _deepspeed(team, zero_stage=2)  # --zero-stage 2 is nbtrain's default
    ds = config["deepspeed_config"]
    assert isinstance(ds, dict) and ds["zero_stage"] == 3 and ds["offload_optimizer_device"] == "cpu"
    assert source["deepspeed_config.zero_stage"] == "your file"
    notice = team_notice(str(team), source)
    assert f"--accelerate-config {team}: used debug, deepspeed_config.offload_optimizer_device, " \
           "deepspeed_config.zero_stage from your file" in notice
    assert TEAM_RULE in notice and "--zero-stage 2" in notice
    assert config["num_processes"] == 2 and "num_processes" not in notice.split(";")[0]  # the gang stays nbtrain's


def test_a_strategy_option_other_than_the_default_wins_over_the_file(team: Path) -> None:
    config, source = _deepspeed(team, zero_stage=1)
    ds = config["deepspeed_config"]
    assert isinstance(ds, dict) and ds["zero_stage"] == 1
    assert "deepspeed_config.zero_stage" not in source
    assert "deepspeed_config.zero_stage" not in team_notice(str(team), source)


def test_the_local_dry_run_names_what_came_from_the_file(team: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_backend, "_accelerate_available", lambda python: True)
    monkeypatch.setattr(extras, "importable", lambda python, module: True)
    captured = capture_cell("1\n", {"__name__": "__main__"})
    bundle = str(captured.write(tmp_path / "bundles"))
    backend = LocalBackend(Store(tmp_path / "home"), gpus=GpuInventory(ids=("0", "1"), names=("fake",) * 2))
    spec = JobSpec(procs_per_node=2, device="gpu", strategy="deepspeed", accelerate_config=str(team))  # type: ignore[arg-type]
    shown = backend.plan(spec, bundle, captured.digest, "job-1").render()
    assert (f"note:      --accelerate-config {team}: used debug, deepspeed_config.offload_optimizer_device, "
            "deepspeed_config.zero_stage from your file") in shown
    assert (f"  from your file {team}: debug, deepspeed_config.offload_optimizer_device, "
            "deepspeed_config.zero_stage") in shown
    text = shown.split("accelerate config (", 1)[1].split("\n", 1)[1]
    config = yaml.safe_load("\n".join(line[2:] for line in text.splitlines() if not line.startswith("  from ")))
    assert config["debug"] is True and config["deepspeed_config"]["zero_stage"] == 3
