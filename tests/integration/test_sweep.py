"""Issue 25's done-when on the local backend: a 2x3 grid sweep with concurrency 2 from ``%%sweep`` gives 6 child
runs under one MLflow parent (read back with the MLflow client); the deliberately bad setting is stopped early and
its verdict says why; the best trial is named; at most 2 trials ran at any moment (their recorded start and end
times); a fresh process attaches to the sweep while it runs and after it ended."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# lr=9.0 is the deliberately bad setting: its loss is far above the others', and it would run 300 steps
CELL = '''%%sweep --name sw --gpus 1 --sweep-param lr=0.1,0.01,9.0 --sweep-param width=16,8 --concurrency 2 \
--objective loss --grace-steps 3 --out sweep
import math
import time
import nbtrain
steps = 10 if lr < 1 else 300
for step in range(1, steps + 1):
    nbtrain.log(step=step, total=steps, loss=1.0 / (step + 1) + abs(math.log10(lr) + 2) + 0.001 * width)
    time.sleep(0.2)
'''


def _attach_in_new_process(sweep_id: str) -> str:
    """``nbtrain sweeps ID`` in a fresh process (what a restarted kernel has: the store only)."""
    done = subprocess.run([sys.executable, "-m", "nbtrain", "sweeps", sweep_id], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_grid_sweep_on_the_local_backend(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         shell: Any, run_cell: Any) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("NBTRAIN_TRACKING", "1")  # after `home`, which turns it off
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    from mlflow import MlflowClient

    # the tracking store exists before the trials' agents start: two creating one sqlite file at once collide
    MlflowClient(tracking_uri=uri).search_experiments()
    run_cell("lr = 0.1\nwidth = 16")
    run_cell(CELL)
    sweep = shell.user_ns["sweep"]
    early = _attach_in_new_process(sweep.id)
    assert f"sweep {sweep.id}: running" in early

    from nbtrain.sweep.record import SweepState, TrialState
    from nbtrain.sweep.supervisor import supervisor_alive

    assert sweep.wait(timeout=480, progress=False) is SweepState.DONE, sweep.summary()
    record = sweep.record
    trials = sweep.trials()
    assert len(trials) == 6 and [t.params for t in record.trials] == [
        {"lr": lr, "width": w} for lr in ("0.1", "0.01", "9.0") for w in ("16", "8")]

    # the bad setting was stopped early by the sweep, and each of its runs' verdicts says why
    states = {t.index: t.state for t in record.trials}
    assert states == {0: TrialState.SUCCEEDED, 1: TrialState.SUCCEEDED, 2: TrialState.SUCCEEDED,
                      3: TrialState.SUCCEEDED, 4: TrialState.STOPPED, 5: TrialState.STOPPED}, sweep.summary()
    for run in trials[4:]:
        assert run.status().value == "cancelled"
        reason = run.store.load(run.id).cancel_reason or ""
        assert reason.startswith(f"stopped early by sweep {sweep.id}: objective loss ") and "worse than the median" in \
            reason, reason
        assert "CANCELLED: stopped early by sweep" in run.summary()
        assert max(step for step, _ in run.metrics()["loss"]) < 100  # stopped long before its 300 steps

    # the best trial is named: lr=0.01, width=8
    best = sweep.best()
    assert best is not None and best.id == record.trials[3].run_id and record.best == 3
    assert "best trial: 3" in sweep.summary()

    # at most 2 trials at any moment, from the trials' recorded start (submit) and end times
    spans = [(r.record.created, r.store.load(r.id).ended) for r in trials]
    assert all(end is not None for _, end in spans)
    for start, _ in spans:
        assert sum(1 for s, e in spans if s <= start < e) <= 2, spans  # type: ignore[operator]

    # 6 child runs under one MLflow parent, read back with the MLflow client
    for run in trials:
        run.wait_tracking(120)
    client = MlflowClient(tracking_uri=uri)
    parent = client.get_run(str(record.mlflow_parent))
    assert parent.data.tags["nbtrain.best_run_id"] == best.id and parent.info.status == "FINISHED"
    assert parent.data.metrics["best_loss"] == pytest.approx(1 / 11 + 0.008)  # step 10 of lr=0.01, width=8
    children = client.search_runs([parent.info.experiment_id],
                                  filter_string=f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    assert sorted(c.data.tags["nbtrain.run_id"] for c in children) == sorted(r.id for r in trials)
    stopped = [c for c in children if "nbtrain.sweep.stopped" in c.data.tags]
    assert sorted(c.data.tags["nbtrain.run_id"] for c in stopped) == sorted(r.id for r in trials[4:])

    # a fresh process (a restarted kernel) attaches to the finished sweep and shows it
    shown = _attach_in_new_process(sweep.id[:12])
    assert f"sweep {sweep.id}: done" in shown and "stopped early: objective loss" in shown and "best trial: 3" in shown

    # nothing of the sweep lives on: its supervisor, the trials' gangs and their tracking agents have exited
    from procs import pids_with_env  # tests/support

    ids = {r.id for r in trials}
    def alive() -> list[int]:
        return [pid for name in ("NBTRAIN_RUN_ID", "NBTRAIN_SUPERVISOR_OF", "NBTRAIN_TRACKING_OF")
                for pid in pids_with_env(name, ids)]

    waited = time.monotonic()
    while alive() and time.monotonic() < waited + 60:
        time.sleep(0.5)
    assert not alive(), f"still alive after {time.monotonic() - waited:.0f} s"
    print(f"trial processes gone {time.monotonic() - waited:.1f} s after the checks")
    assert not supervisor_alive(sweep.store, sweep.id)


def test_sweep_mistakes_and_dry_run_start_nothing(home: Path, shell: Any, run_cell: Any,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from IPython.core.error import UsageError

    run_cell("lr = 0.1")
    body = "\nprint(lr)\n"
    with pytest.raises(UsageError, match=r"%%sweep: nothing was submitted\. --sweep: a sweep needs the parameters"):
        run_cell("%%sweep --gpus 1" + body)
    with pytest.raises(UsageError, match=r"'depth' is not a parameter of this cell \(.*\); parameters: lr\."):
        run_cell("%%distributed --gpus 1 --sweep-param depth=1,2" + body)
    with pytest.raises(UsageError, match="a sweep starts new runs"):
        run_cell("%%sweep --resume abc --sweep-param lr=1,2" + body)
    with pytest.raises(UsageError, match="--trials 3: a grid runs every combination"):
        run_cell("%%sweep --sweep-param lr=1,2 --trials 3" + body)
    with pytest.raises(UsageError, match=r"trial 1 \(lr=fast\): --param lr=fast: not a valid float"):
        run_cell("%%sweep --gpus 1 --sweep-param lr=0.5,fast" + body)
    run_cell("%%sweep --gpus 1 --sweep-param lr=0.5,0.05 --concurrency 2 --dry-run" + body)
    out = capsys.readouterr().out
    assert "sweep: grid, 2 trial(s), at most 2 at a time" in out and "trial 1: lr=0.05" in out
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())
    assert not (home / "sweeps").exists() or not any((home / "sweeps").iterdir())


JOB_CELL = """%%distributed --nodes 1 --gpus 1 --name jobsw
import time
import nbtrain
for step in range(1, 13):
    nbtrain.log(step=step, loss=scale + 1.0 / step)
    time.sleep(0.25)
"""


def _nbtrain(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nbtrain", *args], capture_output=True, text=True, timeout=300)


def _supervisor_pids(sweep_id: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"nbtrain.sweep.supervisor" in cmdline and sweep_id.encode() in cmdline:
            pids.append(int(proc.name))
    return pids


def test_cli_sweep_of_an_exported_job_survives_its_supervisor(home: Path, tmp_path: Path) -> None:
    """`nbtrain sweep DIR` over a job's parameter; the supervisor is killed mid-sweep (a reboot, an OOM kill) and
    `nbtrain sweeps ID` starts a new one, which follows the submitted trials and finishes the sweep."""
    import json

    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    notebook = tmp_path / "jobsw.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("scale = 1.0", metadata={"tags": ["parameters"]}),
                                       new_code_cell(JOB_CELL)]), str(notebook))
    done = _nbtrain("export", str(notebook), "-o", str(tmp_path / "job"), "--json")
    assert done.returncode == 0, done.stderr
    bad = _nbtrain("sweep", str(tmp_path / "job"), "--sweep-param", "depth=1,2")
    assert bad.returncode == 2 and "'depth' is not a parameter of the job" in bad.stderr and "scale" in bad.stderr
    started = _nbtrain("sweep", str(tmp_path / "job"), "--sweep-param", "scale=3.0,1.0", "--objective", "loss",
                       "--early-stop", "none", "--json")
    assert started.returncode == 0, started.stderr
    sweep_id = json.loads(started.stdout)["sweep_id"]

    deadline = time.monotonic() + 60
    while not (pids := _supervisor_pids(sweep_id)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in pids:
        os.kill(pid, 9)  # the supervisor this test started, by its pid
    time.sleep(1)
    assert not _supervisor_pids(sweep_id)

    shown = _nbtrain("sweeps", sweep_id)  # attach: a new supervisor carries the sweep on
    assert shown.returncode == 0 and f"sweep {sweep_id}: running" in shown.stdout, shown.stdout + shown.stderr
    from nbtrain.store import Store
    from nbtrain.sweep.handle import Sweep
    from nbtrain.sweep.record import SweepState, TrialState

    sweep = Sweep(sweep_id, Store(home))
    assert sweep.wait(timeout=240, progress=False) is SweepState.DONE, sweep.summary()
    record = sweep.record
    assert [t.state for t in record.trials] == [TrialState.SUCCEEDED, TrialState.SUCCEEDED]
    assert len({t.run_id for t in record.trials}) == 2 and len(Store(home).records()) == 2  # none submitted twice
    assert record.best == 1 and [t.params for t in record.trials] == [{"scale": "3.0"}, {"scale": "1.0"}]
    assert sweep.trials()[1].metrics()["loss"][-1][1] == pytest.approx(1.0 + 1 / 12)
    listed = _nbtrain("sweeps")
    assert sweep_id in listed.stdout and "done" in listed.stdout and "2/2 trials ended" in listed.stdout
    deadline = time.monotonic() + 30
    while _supervisor_pids(sweep_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _supervisor_pids(sweep_id)


def test_cancelling_a_sweep_cancels_its_running_trial_and_starts_no_other(home: Path, shell: Any,
                                                                           run_cell: Any) -> None:
    from nbtrain.sweep.record import SweepState, TrialState

    run_cell("pause = 300")
    run_cell("%%sweep --name cx --gpus 1 --sweep-param pause=300,301 --out sweep\nimport time\ntime.sleep(pause)\n")
    sweep = shell.user_ns["sweep"]
    deadline = time.monotonic() + 120
    while sweep.record.trials[0].run_id is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sweep.cancel() is SweepState.CANCELLED
    record = sweep.record
    assert [t.state for t in record.trials] == [TrialState.CANCELLED, TrialState.CANCELLED]
    assert record.trials[1].run_id is None  # never started
    (run,) = sweep.trials()
    assert run.status().value == "cancelled"
    assert run.store.load(run.id).cancel_reason == f"sweep {sweep.id} was cancelled (sweep.cancel())"
    assert "cancelled" in sweep.summary() and sweep.best() is None


def test_a_killed_kernel_leaves_the_sweep_running_and_a_new_kernel_attaches(home: Path, tmp_path: Path,
                                                                            kernel_factory: Any) -> None:
    """The done-when's last clause with real kernels: the kernel that started the sweep is killed (no clean-up of
    its own runs), and ``%nbtrain sweep ID`` in a new kernel shows the sweep, which its supervisor finished."""
    import signal

    first = kernel_factory(tmp_path)
    first.execute("%load_ext nbtrain\nsteps = 4")
    first.execute("%%sweep --name kr --gpus 1 --sweep-param steps=4,6 --objective loss --out sweep\nimport time\n"
                  "import nbtrain\nfor step in range(1, steps + 1):\n    nbtrain.log(step=step, loss=1.0 / step)\n"
                  "    time.sleep(0.5)\n")
    said = "".join(m["content"].get("text", "") for m in first.messages if m["msg_type"] == "stream")
    sweep_id = said.split(":")[0].strip()
    assert sweep_id.startswith("kr-sweep-"), said
    os.kill(first.pid, signal.SIGKILL)
    first.client.stop_channels()
    second = kernel_factory(tmp_path)
    second.execute(f"%load_ext nbtrain\n%nbtrain sweep {sweep_id} --out again")
    second.execute("print(again.wait(timeout=240, progress=False).value)\nprint(again.summary())", timeout=300)
    shown = "".join(m["content"].get("text", "") for m in second.messages if m["msg_type"] == "stream")
    assert f"sweep {sweep_id}: running" in shown or f"sweep {sweep_id}: done" in shown  # the %nbtrain sweep summary
    assert "\ndone\n" in shown and "trial 1: steps=6" in shown and "best trial: 1" in shown, shown
