"""The typed gang request (nbtrain/gang/request.py) and Slurm's (nbtrain/backends/slurm/request.py) across plan.json.

What a plan decided is what the supervisor reads back (to_json, then from_json, gives the same request); a plan.json
written by the previous version (a dict of string keys) is still read; what the previous version wrote is still
written (a supervisor of that version on a Slurm cluster reads it); a damaged file is refused naming the key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nbtrain.backends.local import backend as local_backend
from nbtrain.backends.local.backend import LocalBackend
from nbtrain.backends.local.gpus import GpuInventory
from nbtrain.backends.slurm.backend import SlurmBackend
from nbtrain.backends.slurm.request import SlurmRequest
from nbtrain.backends.slurm.script import srun_argv
from nbtrain.gang.files import write_attempt_files
from nbtrain.gang.request import GangRequest
from nbtrain.spec import JobSpec
from nbtrain.store import Store

#: The keys the previous version wrote into a local attempt's plan.json (a dict built in LocalBackend._plan).
PREVIOUS_LOCAL_KEYS = {"run_id", "attempt", "world_size", "use_gpu", "port", "launchers", "events_dir", "logs_dir",
                       "tmp_dir", "attempt_dir", "timeout_s", "stall_after_s", "hang_timeout_s", "restart_budget",
                       "store_root", "accelerate_config", "bundle_dir", "bundle_digest", "notices", "describe"}
PREVIOUS_SLURM_KEYS = (PREVIOUS_LOCAL_KEYS - {"port"}) | {"nodes", "spec", "python", "cwd", "env", "sbatch_options",
                                                         "script"}


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalBackend:
    monkeypatch.setattr(local_backend, "_accelerate_available", lambda python: True)
    return LocalBackend(Store(tmp_path / "home"), python="/envs/train/bin/python",
                        gpus=GpuInventory(ids=("0", "1", "2", "3"), names=("H100",) * 4))


def _slurm_request(tmp_path: Path, **spec: Any) -> SlurmRequest:
    backend = SlurmBackend(Store(tmp_path / "home"), python="/shared/venv/bin/python")
    plan = backend._plan(JobSpec(backend="slurm", **spec), "/shared/bundles/b", "b" * 64, "job-1", check=False,
                         use_gpu=False, cwd="/shared/work")
    return plan.request


@pytest.mark.parametrize("spec", [{"nodes": 2, "procs_per_node": 2, "timeout_s": 30, "max_restarts": 2},
                                  {"procs_per_node": 2, "device": "cpu", "warm": True}], ids=["gpu", "warm"])
def test_a_local_request_reads_back_as_planned(local: LocalBackend, spec: dict[str, Any]) -> None:
    request = local.plan(JobSpec(**spec), "/store/bundles/b", "b" * 64, "job-1").request
    written = json.loads(json.dumps(request.to_json()))  # through JSON, as plan.json
    assert GangRequest.from_json(written) == request
    assert set(written) >= PREVIOUS_LOCAL_KEYS  # a supervisor of the previous version still finds every key
    assert written["events_dir"] == str(request.events_dir) == str(Path(request.attempt_dir) / "events")
    assert request.nodes == spec.get("nodes", 1) and request.port is not None


def test_a_slurm_request_reads_back_and_its_gang_part_is_the_engines(tmp_path: Path) -> None:
    request = _slurm_request(tmp_path, nodes=2, procs_per_node=3, max_restarts=1)
    written = json.loads(json.dumps(request.to_json()))
    assert SlurmRequest.from_json(written) == request
    assert set(written) >= PREVIOUS_SLURM_KEYS and written["nodes"] == 2
    gang = GangRequest.from_json(written)  # what the engine reads of a Slurm attempt
    assert type(gang) is GangRequest and gang.launchers == request.launchers and gang.restart_budget == 1
    assert [launcher.ranks for launcher in gang.launchers] == [(0, 1, 2), (3, 4, 5)]
    argv = srun_argv(request, address="10.0.0.1", port=29500)
    assert argv[:3] == ["srun", "--nodes=2", "--ntasks=2"]
    assert argv[-6:] == ["/shared/venv/bin/python", "-m", "nbtrain.backends.slurm.node", request.attempt_dir,
                         "10.0.0.1", "29500"]


def test_the_supervisor_reads_the_file_submit_writes(local: LocalBackend) -> None:
    request = local.plan(JobSpec(procs_per_node=2, device="cpu"), "/store/bundles/b", "b" * 64, "job-1").request
    root = write_attempt_files(request)
    assert GangRequest.load(root / "plan.json") == request
    assert Path(request.accelerate_config.path).read_text() == request.accelerate_config.text
    assert (root / "plan.json").stat().st_mode & 0o777 == 0o600


def test_a_previous_versions_plan_json_is_read(tmp_path: Path) -> None:
    """Written by the previous version's Slurm backend (a dict), without the keys that are optional now."""
    root = tmp_path / "runs" / "job-1" / "attempts" / "0"
    old = {
        "run_id": "job-1", "attempt": 0, "world_size": 2, "nodes": 2, "use_gpu": False,
        "spec": JobSpec(backend="slurm", nodes=2).to_dict(), "python": "/venv/bin/python", "cwd": "/work",
        "env": {"NBTRAIN_RUN_ID": "job-1"}, "launchers": [{"node": 0, "ranks": [0]}, {"node": 1, "ranks": [1]}],
        "events_dir": str(root / "events"), "logs_dir": str(root / "logs"), "tmp_dir": str(root / "tmp"),
        "attempt_dir": str(root), "store_root": str(tmp_path), "bundle_dir": "/b", "bundle_digest": "d" * 64,
        "accelerate_config": {"path": str(root / "accelerate.yaml"), "text": "num_processes: 2\n"},
        "describe": "device: CPU", "sbatch_options": ["--nodes=2"], "script": "#!/bin/sh\n", "unknown_later": 1,
    }
    request = SlurmRequest.from_json(old)
    assert request.restart_budget == 0 and request.timeout_s is None and request.notices == ()
    assert request.launchers[1].ranks == (1,) and request.launchers[1].argv == () and request.nodes == 2
    assert request.events_dir == root / "events" and request.env == {"NBTRAIN_RUN_ID": "job-1"}
    assert request.spec.nodes == 2 and request.cwd == "/work"


@pytest.mark.parametrize(("change", "named"), [
    ({"run_id": None}, "'run_id'"), ({"launchers": None}, "'launchers'"), ({"cwd": None}, "'cwd'"),
    ({"world_size": "two"}, "malformed"), ({"launchers": [{"node": 0}]}, "'ranks'"),
], ids=["run_id", "launchers", "cwd", "world_size", "ranks"])
def test_a_damaged_plan_json_is_refused_naming_what_is_wrong(tmp_path: Path, change: dict[str, Any],
                                                            named: str) -> None:
    data = _slurm_request(tmp_path).to_json()
    for key, value in change.items():
        if value is None:
            del data[key]
        else:
            data[key] = value
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="resume the run") as caught:
        SlurmRequest.load(path)
    assert named in str(caught.value)
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not an attempt's request"):
        GangRequest.load(path)


def test_a_warm_request_carries_the_gang_it_claimed_and_a_cold_one_claims_none(local: LocalBackend) -> None:
    warm = local.plan(JobSpec(procs_per_node=2, device="cpu", warm=True), "/b", "b" * 64, "job-1").request
    claimed = warm.on_warm_gang(Path("/home/u/.nbtrain/gangs/abc"))
    assert claimed.warm is not None and claimed.warm.gang_dir == "/home/u/.nbtrain/gangs/abc"
    assert GangRequest.from_json(json.loads(json.dumps(claimed.to_json()))) == claimed
    cold = local.plan(JobSpec(procs_per_node=2, device="cpu"), "/b", "b" * 64, "job-2").request
    assert "warm" not in cold.to_json()
    with pytest.raises(ValueError, match="not planned with --warm"):
        cold.on_warm_gang(Path("/g"))


def test_submit_refuses_a_request_of_another_backend(local: LocalBackend, tmp_path: Path) -> None:
    from nbtrain.errors import BackendError

    plan = local.plan(JobSpec(procs_per_node=2, device="cpu"), "/b", "b" * 64, "job-1")
    with pytest.raises(BackendError, match="not a SlurmRequest"):
        SlurmBackend(Store(tmp_path / "home")).submit(plan)
    assert not (tmp_path / "home" / "runs").exists()
