"""``nbtrain stats`` on a store with known runs: records, status files and rank events written through the store's
writers (``Store.save``, ``write_json_atomic``, the event schema's ``Event.to_json``) with chosen timestamps, then
the exact figures in --json, the text report and the Prometheus text; ``--since`` filters."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nbtrain.cli import main
from nbtrain.events import Event, EventKind
from nbtrain.model import Failure
from nbtrain.spec import JobSpec
from nbtrain.stats.collect import store_owner
from nbtrain.store import RunRecord, Store, private_dir, write_json_atomic

DAY = 86400.0


def _status(store: Store, run_id: str, attempt: int, state: str, started: float, ended: float) -> None:
    """status.json as the local supervisor writes it (nbtrain.gang.engine.Engine.write_status)."""
    failure = Failure(reason="the training code raised", rank=0).to_dict() if state == "failed" else None
    write_json_atomic(store.attempt_dir(run_id, attempt) / "status.json", {
        "state": state, "attempt": attempt, "started": started, "ended": ended, "failure": failure,
        "retrying": False, "supervisor_pid": os.getpid(), "launchers": [], "updated": ended, "detail": ""})


def _events(store: Store, run_id: str, attempt: int, rank: int, *events: tuple[EventKind, float, dict[str, Any]]
            ) -> None:
    """A rank's event file: the lines EventWriter writes, at chosen times."""
    path = store.attempt_dir(run_id, attempt) / "events" / f"rank-{rank}.jsonl"
    private_dir(path.parent)
    with open(path, "a", encoding="utf-8") as handle:
        for seq, (kind, when, data) in enumerate(events):
            handle.write(Event(kind, f"rank-{rank}", seq, when, attempt, rank, data).to_json() + "\n")


def _started(store: Store, run_id: str, attempt: int, times: list[float]) -> None:
    for rank, when in enumerate(times):
        _events(store, run_id, attempt, rank, (EventKind.RANK_START, when, {"node": 0, "local_rank": rank}),
                (EventKind.HEARTBEAT, when + 1, {"step": 0}))


def _record(store: Store, run_id: str, spec: JobSpec, created: float, state: str, ended: float | None,
            attempts: list[dict[str, Any]], backend: str = "local", notebook: dict[str, Any] | None = None,
            profile: str | None = None) -> None:
    store.save(RunRecord(run_id, spec, "0" * 64, backend, handle={"attempt": attempts[-1]["attempt"]},
                         created=created, notebook=notebook or {}, attempts=attempts, state=state, ended=ended,
                         profile=profile))


def known_store(root: Path, now: float) -> float:
    """Five runs of one user (see the module docstring of the expected figures below); returns T0 = now - 10 days."""
    store, t0, old = Store(root), now - 10 * DAY, now - 40 * DAY
    store.ensure_writable()
    # A: 40 days old, one rank, succeeded: the user's first run (outside a 30-day window)
    _record(store, "old-000001", JobSpec(name="old", procs_per_node=1), old, "succeeded", old + 65,
            [{"attempt": 0, "submitted": old}])
    _status(store, "old-000001", 0, "succeeded", old + 5, old + 65)
    # B: 1x2 from a notebook cell: fails after a checkpoint, then the user resumes it and it succeeds
    cell = {"path": "work/train.ipynb", "cell_id": "cell-a"}
    _record(store, "train-000002", JobSpec(name="train", procs_per_node=2), t0, "succeeded", t0 + 500,
            [{"attempt": 0, "submitted": t0},
             {"attempt": 1, "submitted": t0 + 200, "kind": "resume", "bundle_digest": "0" * 64}], notebook=cell,
            profile="multinode-ddp 1.0")  # started from a template
    _started(store, "train-000002", 0, [t0 + 3, t0 + 4])  # every rank started 4 s after the submit
    _events(store, "train-000002", 0, 0, (EventKind.CHECKPOINT, t0 + 50, {"step": 10, "path": "/ckpt/10"}))
    _status(store, "train-000002", 0, "failed", t0 + 1, t0 + 100)
    _started(store, "train-000002", 1, [t0 + 210, t0 + 206])  # 10 s
    _status(store, "train-000002", 1, "succeeded", t0 + 201, t0 + 500)
    # C: 2x2, rank 3 never started; fails, its automatic restart (no record entry) fails too: never recovered
    _record(store, "eval-000003", JobSpec(name="eval", nodes=2, procs_per_node=2, max_restarts=1), t0 + 1000,
            "failed", t0 + 1130, [{"attempt": 0, "submitted": t0 + 1000}])
    _started(store, "eval-000003", 0, [t0 + 1002, t0 + 1002, t0 + 1003])
    _status(store, "eval-000003", 0, "failed", t0 + 1001, t0 + 1061)
    _status(store, "eval-000003", 1, "failed", t0 + 1070, t0 + 1130)
    # D: cancelled
    _record(store, "cancel-000004", JobSpec(name="cancel", procs_per_node=1), t0 + 2000, "cancelled", t0 + 2031,
            [{"attempt": 0, "submitted": t0 + 2000}])
    _status(store, "cancel-000004", 0, "cancelled", t0 + 2001, t0 + 2031)
    # E: Slurm, 2 nodes x 4 GPUs, one hour, all ranks started 30 s after the submit
    _record(store, "big-000005", JobSpec(name="big", nodes=2, procs_per_node=4, device="gpu", backend="slurm"),
            t0 + 3000, "succeeded", t0 + 6610, [{"attempt": 0, "submitted": t0 + 3000}], backend="slurm")
    _started(store, "big-000005", 0, [t0 + 3030 - r for r in range(8)])
    _status(store, "big-000005", 0, "succeeded", t0 + 3010, t0 + 6610)
    # F: a run of `nbtrain validate`'s ladder (a check of a job directory): counted nowhere
    _record(store, "check-000006", JobSpec(name="check", procs_per_node=2), t0 + 7000, "failed", t0 + 7030,
            [{"attempt": 0, "submitted": t0 + 7000}], notebook={"job_dir": "/ci/job", "validate": "distributed"})
    _status(store, "check-000006", 0, "failed", t0 + 7001, t0 + 7030)
    return t0


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(["stats", *argv])
    out, err = capsys.readouterr()
    assert code == 0, f"nbtrain stats {' '.join(argv)} exited {code}: {err}"
    return out


@pytest.fixture
def store_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, float]:
    root = tmp_path / "nbtrain-home"
    monkeypatch.setenv("NBTRAIN_HOME", str(root))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # the store alone, unless a test adds MLflow
    now = time.time()
    return root, known_store(root, now)


def test_json_has_the_known_figures(store_root: tuple[Path, float], capsys: pytest.CaptureFixture[str]) -> None:
    root, _ = store_root
    doc = json.loads(_cli(capsys, "--json"))
    user = store_owner(root)
    assert doc["sources"] == [{"store": str(root), "user": user}]
    assert doc["window"]["seconds"] == 30 * DAY
    assert doc["runs"] == {"total": 4, "succeeded": 2, "failed": 1, "cancelled": 1, "live": 0,
                           "success_rate": pytest.approx(2 / 3)}
    (who,) = doc["users"]
    assert (who["user"], who["runs"]) == (user, 5)
    assert who["time_to_first_distributed_s"] == pytest.approx(30 * DAY + 500)  # first run A -> B's success
    recovery = doc["recovery"]
    assert (recovery["incidents"], recovery["recovered"], recovery["unrecovered"]) == (2, 1, 1)
    assert recovery["time_to_recover_s"]["mean"] == pytest.approx(400.0)  # B failed at t0+100, succeeded at t0+500
    assert [(i["job"], i["recovered_s"]) for i in recovery["incidents_list"]] == [
        ("work/train.ipynb#cell-a", pytest.approx(400.0)), ("eval", None)]
    wait = doc["queue_wait_s"]
    assert (wait["count"], wait["p50"], wait["p90"], wait["max"]) == (3, pytest.approx(10.0), pytest.approx(30.0),
                                                                      pytest.approx(30.0))
    assert wait["mean"] == pytest.approx((4 + 10 + 30) / 3)  # C had a rank that never started: not counted
    assert (doc["templates"]["runs"], doc["templates"]["share"]) == (1, pytest.approx(1 / 4))  # B, of the window's 4
    assert doc["checkpoint_recovery"] == {"resumed_attempts": 2, "from_checkpoint": 1, "succeeded": 1, "rate": 1.0}
    assert doc["backends"] == [
        {"backend": "local", "runs": 3, "attempts": 5, "process_hours": pytest.approx((2 * 398 + 4 * 120 + 30) / 3600),
         "gpu_hours": 0.0},
        {"backend": "slurm", "runs": 1, "attempts": 1, "process_hours": pytest.approx(8.0),
         "gpu_hours": pytest.approx(8.0)}]


def test_since_filters_the_window(store_root: tuple[Path, float], capsys: pytest.CaptureFixture[str]) -> None:
    every = json.loads(_cli(capsys, "--json", "--since", "all"))
    assert every["window"] == {"start": None, "seconds": None}
    assert (every["runs"]["total"], every["runs"]["succeeded"], every["runs"]["success_rate"]) == (5, 3, 0.75)
    day = json.loads(_cli(capsys, "--json", "--since", "1d"))
    assert day["runs"]["total"] == 0 and day["backends"] == [] and day["queue_wait_s"]["count"] == 0
    assert day["users"][0]["time_to_first_distributed_s"] == pytest.approx(30 * DAY + 500)  # lifetime figure
    assert main(["stats", "--since", "soon"]) != 0
    assert "--since 'soon': expected a duration such as 30d" in capsys.readouterr().err


def test_text_report_lines(store_root: tuple[Path, float], capsys: pytest.CaptureFixture[str]) -> None:
    root, _ = store_root
    lines = _cli(capsys).splitlines()
    assert f"  store {root} (user {store_owner(root)})" in lines
    assert f"  {store_owner(root)}: 30.0 d (5 runs, first " in "\n".join(lines)
    assert "runs: 4 (2 succeeded, 1 failed, 1 cancelled, 0 not finished)" in lines
    assert "success rate: 66.7% (succeeded / (succeeded + failed))" in lines
    assert "time to recover: 1 recovered failure streak: mean 6.7 min, median 6.7 min, p90 6.7 min, max 6.7 min; " \
           "1 not recovered yet" in lines
    assert "queue wait (submitted -> all ranks started): 3 attempts: mean 14.7 s, median 10.0 s, p90 30.0 s, " \
           "max 30.0 s" in lines
    assert ("checkpoint recovery: 1 of 1 resumed attempts with a checkpoint succeeded (100.0%); "
            "2 resumed attempts in all") in lines
    assert "  local: 0.363 process-hours, 0.000 GPU-hours (3 runs, 5 attempts)" in lines
    assert "  slurm: 8.000 process-hours, 8.000 GPU-hours (1 run, 1 attempt)" in lines


def test_prometheus_output_parses(store_root: tuple[Path, float], capsys: pytest.CaptureFixture[str]) -> None:
    root, _ = store_root
    text = _cli(capsys, "--prometheus")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert samples[("nbtrain_runs", (("state", "failed"),))] == 1.0
    assert samples[("nbtrain_run_success_ratio", ())] == pytest.approx(2 / 3)
    assert samples[("nbtrain_queue_wait_seconds_count", ())] == 3.0
    assert samples[("nbtrain_gang_gpu_hours", (("backend", "slurm"),))] == pytest.approx(8.0)
    assert samples[("nbtrain_stats_source_info", (("store", str(root)), ("user", store_owner(root))))] == 1.0
    assert families["nbtrain_time_to_recover_seconds"].type == "summary"


def test_merged_stores_count_each_store_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    now = time.time()
    first, second = tmp_path / "a", tmp_path / "b"
    known_store(first, now)
    known_store(second, now)
    doc = json.loads(_cli(capsys, "--json", "--store", str(first), "--store", str(second)))
    assert [s["store"] for s in doc["sources"]] == [str(first), str(second)]
    assert doc["runs"]["total"] == 8 and doc["users"][0]["runs"] == 10
    assert main(["stats", "--store", str(tmp_path / "nope")]) != 0
    assert "no such directory" in capsys.readouterr().err


def _mlflow_run(client: Any, experiment: str, run_id: str, user: str, status: str, start: float, end: float) -> None:
    """An MLflow run as the tracking agent makes it: describe.run_tags, then set_terminated with the end time."""
    from nbtrain.tracking.describe import run_tags

    tags = run_tags(run_id=run_id, spec=JobSpec(name=run_id.rsplit("-", 1)[0], procs_per_node=2), backend="local",
                    bundle_digest="0" * 64, notebook={}, manifest=None, commit=None, user=user)
    created = client.create_run(experiment, start_time=int(start * 1000), tags=tags, run_name=run_id)
    client.set_terminated(created.info.run_id, status=status, end_time=int(end * 1000))


@pytest.mark.slow  # a real MLflow sqlite store: ~50 s of migrations on a 2-core machine
def test_runs_pruned_from_the_store_are_read_from_mlflow(store_root: tuple[Path, float], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from mlflow.tracking import MlflowClient

    root, t0 = store_root
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("stats")
    me = store_owner(root)
    _mlflow_run(client, experiment, "train-000002", me, "FINISHED", t0, t0 + 500)  # the store has it: not twice
    _mlflow_run(client, experiment, "pruned-00000a", me, "FAILED", t0 + 4000, t0 + 4060)
    _mlflow_run(client, experiment, "pruned-00000b", me, "FINISHED", t0 + 5000, t0 + 5100)
    _mlflow_run(client, experiment, "theirs-00000c", "someone-else", "FAILED", t0 + 4000, t0 + 4001)

    doc = json.loads(_cli(capsys, "--json", "--tracking-uri", uri))
    assert doc["sources"][-1] == {"store": f"mlflow:{uri}", "user": me}
    assert doc["runs"]["total"] == 6 and doc["runs"]["succeeded"] == 3 and doc["runs"]["failed"] == 2
    assert [(i["job"], i["recovered_s"]) for i in doc["recovery"]["incidents_list"]] == [
        ("work/train.ipynb#cell-a", pytest.approx(400.0)), ("eval", None), ("pruned", pytest.approx(1040.0))]
    local = next(b for b in doc["backends"] if b["backend"] == "local")
    assert (local["runs"], local["attempts"]) == (5, 7)
    assert local["process_hours"] == pytest.approx((2 * 398 + 4 * 120 + 30 + 2 * 60 + 2 * 100) / 3600)
    assert doc["queue_wait_s"]["count"] == 3  # MLflow does not know when ranks started

    assert json.loads(_cli(capsys, "--json", "--tracking-uri", "none"))["runs"]["total"] == 4
    garbage = tmp_path / "not-a-database.db"
    garbage.write_bytes(b"this is not sqlite" * 100)
    assert main(["stats", "--tracking-uri", f"sqlite:///{garbage}"]) != 0
    assert "could not read nbtrain runs from MLflow at sqlite:///" in capsys.readouterr().err


def test_the_magic_prints_the_same_figures(shell: Any, home: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    known_store(home, time.time())
    shell.run_line_magic("nbtrain", "stats --json --since all")
    doc = json.loads(capsys.readouterr().out)
    assert (doc["runs"]["total"], doc["runs"]["succeeded"], doc["checkpoint_recovery"]["rate"]) == (5, 3, 1.0)
    shell.run_line_magic("nbtrain", "stats")
    assert "runs: 4 (2 succeeded, 1 failed, 1 cancelled, 0 not finished)" in capsys.readouterr().out.splitlines()
    shell.run_line_magic("nbtrain", "help")
    assert "stats [--since 30d] [--json]" in capsys.readouterr().out
