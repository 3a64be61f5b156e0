"""Tracking throughput: metric points/s from a running (synthetic) gang into MLflow through nbtrain's forwarder,
against a plain ``MlflowClient.log_batch`` loop of the same points, side by side in one run.

A synthetic gang (a writer process, like bench/stream.py's) appends rank 0's METRIC events to the run's
event file as fast as it can; the notebook side is the real thing: a Run handle whose watcher feeds a
TrackingForwarder. nbtrain's number is points / (time from the first event written to the last point
acknowledged by MLflow, as recorded in the forwarder's ledger); the MLflow run is created beforehand, as
it is while a real gang starts up. The plain loop logs the same (key, value, timestamp, step) points in
chunks of 1,000 into a fresh run of the same store. Runs alternate (nbtrain, plain, nbtrain, ...) and
medians are printed with their ratio (target >= 0.8). Nothing is asserted.

Usage: python bench/tracking.py [--points 40000] [--repeats 3] [--server]
       (--server: also against `mlflow server` on loopback, started and stopped by this script)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

VALUES_PER_EVENT = 2

WRITER = r'''
import sys, time
from pathlib import Path
from nbtrain.events import EventKind, EventWriter
path, events = Path(sys.argv[1]), int(sys.argv[2])
writer = EventWriter(path, "rank-0", rank=0)
for step in range(events):
    writer.emit(EventKind.METRIC, step=step, values={"loss": 1.0 / (step + 1), "lr": 0.1 * 0.999 ** step})
'''


def _fake_run(points: int) -> tuple[object, Path, object]:
    """A run record whose attempt 0 is "running" under this process (the synthetic supervisor)."""
    from nbtrain.events import EventKind, EventWriter
    from nbtrain.spec import JobSpec
    from nbtrain.store import RunRecord, Store, write_json_atomic

    store = Store()
    store.ensure_writable()
    run_id = store.new_run_id("bench-tracking")
    store.save(RunRecord(run_id=run_id, spec=JobSpec(name="bench-tracking", procs_per_node=1, device="cpu",
                                                     experiment="nbtrain-bench"),
                         bundle_digest="0" * 64, backend="local"))
    attempt = store.attempt_dir(run_id, 0)
    (attempt / "logs").mkdir(parents=True)
    supervisor = EventWriter(attempt / "events" / "supervisor.jsonl", "supervisor")
    write_json_atomic(attempt / "status.json", {"state": "running", "attempt": 0, "started": time.time(),
                                                "supervisor_pid": os.getpid(), "failure": None})
    supervisor.emit(EventKind.STATE, state="running", reason="")
    return store, attempt, supervisor


def _finish(attempt: Path, supervisor: object) -> None:
    from nbtrain.events import EventKind
    from nbtrain.store import write_json_atomic

    supervisor.emit(EventKind.STATE, state="succeeded", reason="")  # type: ignore[attr-defined]
    write_json_atomic(attempt / "status.json", {"state": "succeeded", "attempt": 0, "ended": time.time(),
                                                "supervisor_pid": os.getpid(), "failure": None})


def through_forwarder(points: int, uri: str) -> tuple[float, str]:
    """Points/s from the gang's first event to MLflow's acknowledgement of the last; and the MLflow run id."""
    from nbtrain.client import Run
    from nbtrain.tracking import TrackingForwarder

    store, attempt, supervisor = _fake_run(points)
    run_id = attempt.parent.parent.name
    run = Run(store.load(run_id), store)  # type: ignore[attr-defined]
    forwarder = TrackingForwarder(run, tracking_uri=uri)
    run.subscribe(forwarder.on_batch)
    ledger = store.run_dir(run_id) / "tracking.json"  # type: ignore[attr-defined]
    while not ledger.exists():  # the MLflow run exists before the gang's first step, as in real life
        time.sleep(0.05)
    events = points // VALUES_PER_EVENT
    path = attempt / "events" / "rank-0.jsonl"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(events)])
    while True:
        try:
            if json.loads(ledger.read_text())["hwm"].get("rank-0|0", 0) >= events:
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    done = time.time()
    writer.wait()
    with open(path, encoding="utf-8") as handle:
        first = json.loads(handle.readline())["t"]  # the gang's first point: the clock starts there
    elapsed = done - first
    _finish(attempt, supervisor)
    run.wait(timeout=120, progress=False)
    forwarder.close()
    return (points + 1) / elapsed, str(forwarder.mlflow_run_id)  # + the nbtrain.attempt point


def plain_log_batch(points: int, uri: str) -> float:
    """Points/s of a bare ``log_batch`` loop (chunks of 1,000) of the same points into a fresh run."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("nbtrain-bench")
    experiment_id = experiment.experiment_id if experiment else client.create_experiment("nbtrain-bench")
    run_id = client.create_run(experiment_id).info.run_id
    now = int(time.time() * 1000)
    events = points // VALUES_PER_EVENT
    start = time.perf_counter()
    batch: list[Metric] = []
    for step in range(events):
        batch.append(Metric("loss", 1.0 / (step + 1), now + step, step))
        batch.append(Metric("lr", 0.1 * 0.999 ** step, now + step, step))
        if len(batch) >= 1000:
            client.log_batch(run_id, metrics=batch, synchronous=True)
            batch = []
    if batch:
        client.log_batch(run_id, metrics=batch, synchronous=True)
    elapsed = time.perf_counter() - start
    client.set_terminated(run_id)
    return points / elapsed


def _start_server(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{root / 'server.db'}", "--artifacts-destination", str(root / "art")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=root, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                return server, url
        except OSError:
            time.sleep(0.3)
    os.killpg(server.pid, signal.SIGKILL)
    raise SystemExit("mlflow server did not start within 120 s")


def _compare(label: str, uri: str, points: int, repeats: int) -> None:
    from mlflow import MlflowClient

    print(f"{label}: {points:,} points per try ({VALUES_PER_EVENT} metrics per event, rank 0), {repeats} tries each …",
          flush=True)
    ours: list[float] = []
    plain: list[float] = []
    for attempt in range(repeats):
        rate, mlflow_run = through_forwarder(points, uri)
        stored = sum(len(MlflowClient(tracking_uri=uri).get_metric_history(mlflow_run, k)) for k in ("loss", "lr"))
        ours.append(rate)
        plain.append(plain_log_batch(points, uri))
        print(f"  try {attempt + 1}: nbtrain forwarder {ours[-1]:,.0f} points/s ({stored:,} stored), "
              f"plain log_batch loop {plain[-1]:,.0f} points/s", flush=True)
    a, b = statistics.median(ours), statistics.median(plain)
    print(f"  median: nbtrain {a:,.0f} points/s vs plain log_batch {b:,.0f} points/s -> ratio {a / b:.2f} "
          f"(target >= 0.8)", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=40_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--server", action="store_true", help="also measure against a local `mlflow server`")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="nbtrain-bench-tracking-"))
    os.environ["NBTRAIN_HOME"] = str(root / "home")
    os.chdir(root)
    for name in [k for k in os.environ if k.startswith("MLFLOW_")]:
        del os.environ[name]
    os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"  # the plain loop's set_terminated
    _compare("MLflow's default store (sqlite:///mlflow.db)", f"sqlite:///{root / 'mlflow.db'}", args.points,
             args.repeats)
    if args.server:
        server, url = _start_server(root)
        try:
            _compare(f"mlflow server at {url}", url, args.points, args.repeats)
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
