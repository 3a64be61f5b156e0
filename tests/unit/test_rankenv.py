"""The one rank-environment builder: nbtrain's names win over --env, the warm key sets the per-run ones aside."""

from __future__ import annotations

from pathlib import Path

from nbtrain.backends.launch import launcher_env
from nbtrain.runtime.rankenv import PER_RUN_ENV, rank_env
from nbtrain.spec import JobSpec
from nbtrain.warm.key import PER_RUN_ENV as WARM_PER_RUN


def test_nbtrain_names_win_over_the_users_env_and_omp_defaults() -> None:
    env = rank_env(run_id="r-1", attempt=2, collective_timeout_s=60.0, tracked=True, stall_s=0.0,
                   checkpoint_dir="/ck/r-1", keep_checkpoints=3, user_env={"NBTRAIN_RUN_ID": "x", "A": "1"},
                   device_env={"ACCELERATE_USE_CPU": "1"}, node_rank=1, omp_threads=4)
    assert env["NBTRAIN_RUN_ID"] == "r-1" and env["NBTRAIN_ATTEMPT"] == "2" and env["A"] == "1"
    assert env["NBTRAIN_NODE_RANK"] == "1" and env["OMP_NUM_THREADS"] == "4" and env["ACCELERATE_USE_CPU"] == "1"
    assert env["NBTRAIN_TRACKED"] == "1" and env["NBTRAIN_CHECKPOINT_DIR"] == "/ck/r-1"
    assert "NBTRAIN_EVENTS_DIR" not in env  # no shared store given: the backend's ranks report otherwise
    assert rank_env(run_id="r", attempt=0, collective_timeout_s=1.0, tracked=False, stall_s=0.0, checkpoint_dir="c",
                    keep_checkpoints=1, user_env={"OMP_NUM_THREADS": "8"})["OMP_NUM_THREADS"] == "8"


def test_launcher_env_places_the_attempts_files_and_the_warm_key_ignores_them(tmp_path: Path) -> None:
    spec = JobSpec(env={"FOO": "bar"}, hang_timeout_s=30.0)
    env = launcher_env(spec, run_id="r-2", attempt=0, checkpoint_dir="/ck", attempt_dir=tmp_path)
    assert env["NBTRAIN_EVENTS_DIR"] == str(tmp_path / "events")
    assert env["NBTRAIN_LOGS_DIR"] == str(tmp_path / "logs")
    assert env["NBTRAIN_RESULT_PATH"] == str(tmp_path / "result.pkl")
    assert env["NBTRAIN_STALL_S"] == "30.0" and env["FOO"] == "bar"
    assert WARM_PER_RUN is PER_RUN_ENV
    assert {k for k in env if k.startswith("NBTRAIN_")} - PER_RUN_ENV == {"NBTRAIN_TRACKED"}
