"""Monitor throughput: a synthetic 16-rank gang at 100,000 log lines/s + 1,000 metric points/s for 20 s.

A synthetic supervisor process writes what a real gang writes (per-rank logs and event files, a live
status) into a run of the store; a real ipykernel attaches to it and displays the monitor widget.
This script plays the front end: it counts the widget's iopub messages and bytes, samples the
kernel's CPU time and resident memory, and afterwards asks the kernel what it received. The same
gang is then watched the naive way (a thread printing every line into an ipywidgets.Output) for
comparison. Nothing is asserted; numbers and ratios are printed.

Usage: python bench/stream.py [--seconds 20] [--naive-seconds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RANKS = 16
LINES_PER_S = 100_000
POINTS_PER_S = 1_000

WRITER = r'''
import os, sys, time
from pathlib import Path
from nbtrain.events import EventKind, EventWriter
attempt_dir, rank, seconds, lines_per_s, points_per_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
logs = open(Path(attempt_dir) / "logs" / f"rank-{rank}.log", "ab", buffering=0)
events = EventWriter(Path(attempt_dir) / "events" / f"rank-{rank}.jsonl", f"rank-{rank}", rank=rank)
events.emit(EventKind.RANK_START, node=rank // 4, local_rank=rank % 4, pid=os.getpid(), host="synthetic")
start = time.monotonic(); line = 0; point = 0
while True:
    elapsed = time.monotonic() - start
    if elapsed >= seconds:
        break
    due_lines = min(int(elapsed * lines_per_s), int(seconds * lines_per_s))
    if due_lines > line:
        logs.write(b"".join(b"rank %02d line %09d loss is going down nicely\n" % (rank, i) for i in range(line, due_lines)))
        line = due_lines
    due_points = int(elapsed * points_per_s)
    while point < due_points:
        events.emit(EventKind.METRIC, step=point, values={"loss": 1.0 / (point + 1)})
        point += 1
    time.sleep(0.01)
total_lines = int(seconds * lines_per_s)
if total_lines > line:
    logs.write(b"".join(b"rank %02d line %09d loss is going down nicely\n" % (rank, i) for i in range(line, total_lines)))
while point < int(seconds * points_per_s):
    events.emit(EventKind.METRIC, step=point, values={"loss": 1.0 / (point + 1)}); point += 1
events.emit(EventKind.RANK_DONE, ok=True, has_result=False)
'''

SUPERVISOR = r'''
import os, subprocess, sys, time
from pathlib import Path
from nbtrain.events import EventKind, EventWriter
from nbtrain.store import write_json_atomic
attempt_dir, seconds, writer = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
ranks, lines, points = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
(attempt_dir / "logs").mkdir(parents=True, exist_ok=True)
out = EventWriter(attempt_dir / "events" / "supervisor.jsonl", "supervisor")
def status(state, ended=None):
    write_json_atomic(attempt_dir / "status.json", {"state": state, "attempt": 0, "started": started, "ended": ended,
                      "failure": None, "supervisor_pid": os.getpid(), "launchers": [], "updated": time.time()})
started = time.time(); status("running"); out.emit(EventKind.STATE, state="starting", reason="")
out.emit(EventKind.STATE, state="running", reason="")
procs = [subprocess.Popen([sys.executable, "-c", writer, str(attempt_dir), str(r), seconds, str(lines // ranks), str(points / ranks)])
         for r in range(ranks)]
codes = [p.wait() for p in procs]
out.emit(EventKind.STATE, state="succeeded" if not any(codes) else "failed", reason="")
status("succeeded" if not any(codes) else "failed", ended=time.time())
'''

WATCH_NBTRAIN = "import nbtrain\nrun = nbtrain.attach({run_id!r})\nrun.show()"
WATCH_NAIVE = r'''
import threading, time, ipywidgets
from pathlib import Path
from IPython.display import display
out = ipywidgets.Output()
display(out)
def follow(root=Path({attempt_dir!r}), seconds={seconds}):
    offsets = {{}}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for path in sorted((root / "logs").glob("rank-*.log")):
            with open(path, "rb") as fh:
                fh.seek(offsets.get(path, 0)); data = fh.read(); cut = data.rfind(b"\n") + 1
                offsets[path] = offsets.get(path, 0) + cut
            for line in data[:cut].decode().splitlines():
                out.append_stdout(line + "\n")
        time.sleep(0.1)
threading.Thread(target=follow, daemon=True).start()
'''


def _proc_stats(pid: int) -> tuple[float, int]:
    """(CPU seconds, resident bytes) of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    return cpu, rss


def _make_run(seconds: float) -> tuple[str, Path]:
    from nbtrain.spec import JobSpec
    from nbtrain.store import RunRecord, Store

    store = Store()
    run_id = store.new_run_id("stream")
    spec = JobSpec(name="stream", nodes=RANKS // 4, procs_per_node=4, device="cpu")
    store.save(RunRecord(run_id=run_id, spec=spec, bundle_digest="0" * 64, backend="local"))
    return run_id, store.attempt_dir(run_id, 0)


def _watch(kernel_code: str, attempt_dir: Path, seconds: float, km, kc) -> dict[str, float]:
    pid = km.provisioner.pid if hasattr(km, "provisioner") and km.provisioner else km.kernel.pid
    supervisor = subprocess.Popen([sys.executable, "-c", SUPERVISOR, str(attempt_dir), str(seconds), WRITER,
                                   str(RANKS), str(LINES_PER_S), str(POINTS_PER_S)])
    time.sleep(0.5)
    kc.execute(kernel_code)
    cpu0, rss0 = _proc_stats(pid)
    t0 = time.monotonic()
    comm_msgs = 0
    comm_bytes = 0
    peak_rss = rss0
    deadline = t0 + seconds + 30
    while time.monotonic() < deadline and (supervisor.poll() is None or time.monotonic() - t0 < seconds):
        try:
            msg = kc.get_iopub_msg(timeout=0.5)
        except queue.Empty:
            msg = None
        if msg is not None and msg["msg_type"] in ("comm_msg", "stream", "update_display_data", "display_data"):
            comm_msgs += 1
            comm_bytes += len(json.dumps(msg["content"], default=str)) + sum(len(b) for b in msg.get("buffers", []))
        peak_rss = max(peak_rss, _proc_stats(pid)[1])
    elapsed = time.monotonic() - t0
    cpu1, _ = _proc_stats(pid)
    supervisor.wait(timeout=120)
    return {"seconds": elapsed, "msgs_per_s": comm_msgs / elapsed, "bytes_per_s": comm_bytes / elapsed,
            "cpu_share": (cpu1 - cpu0) / elapsed, "rss_growth_mb": (peak_rss - rss0) / 1e6}


def _kernel_value(kc, expression: str, timeout: float = 120) -> object:
    reply = kc.execute_interactive(f"import json\nprint('@@' + json.dumps({expression}))", timeout=timeout,
                                   output_hook=_collect)
    assert reply["content"]["status"] == "ok", reply["content"]
    return json.loads(_collected.pop())


_collected: list[str] = []


def _collect(msg: dict) -> None:
    if msg["msg_type"] == "stream":
        for line in msg["content"]["text"].splitlines():
            if line.startswith("@@"):
                _collected.append(line[2:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--naive-seconds", type=float, default=5)
    args = parser.parse_args()
    os.environ.setdefault("NBTRAIN_HOME", tempfile.mkdtemp(prefix="nbtrain-stream-"))
    from jupyter_client.manager import start_new_kernel

    results = {}
    for label, seconds in (("nbtrain monitor", args.seconds), ("naive Output.append_stdout", args.naive_seconds)):
        run_id, attempt_dir = _make_run(seconds)
        km, kc = start_new_kernel(kernel_name="python3")
        try:
            kc.execute_interactive("import nbtrain.client, ipywidgets", timeout=60)
            code = WATCH_NBTRAIN.format(run_id=run_id) if label.startswith("nbtrain") else \
                WATCH_NAIVE.format(attempt_dir=str(attempt_dir), seconds=seconds)
            print(f"{label}: {RANKS} ranks, {LINES_PER_S:,} lines/s + {POINTS_PER_S:,} points/s for {seconds:.0f} s …",
                  flush=True)
            stats = _watch(code, attempt_dir, seconds, km, kc)
            if label.startswith("nbtrain"):
                expected_lines = int(seconds * (LINES_PER_S // RANKS))
                expected_points = int(seconds * POINTS_PER_S / RANKS)
                kc.execute_interactive("run.wait(progress=False);", timeout=120)
                got = _kernel_value(kc, "{r: [len(run.logs(r).splitlines()), len(set(run.logs(r).splitlines())), "
                                    "run.monitor()._model.line_counts.get(r, 0), len(run.metrics(r)['loss']), "
                                    f"len({{s for s, _ in run.metrics(r)['loss']}})] for r in range({RANKS})}}")
                assert isinstance(got, dict)
                lines_ok = all(v[0] == v[1] == v[2] == expected_lines for v in got.values())
                points_ok = all(v[3] == v[4] == expected_points for v in got.values())
                stats["lines_ok"] = float(lines_ok)
                stats["points_ok"] = float(points_ok)
                print(f"  delivered: {sum(v[2] for v in got.values()):,} / {expected_lines * RANKS:,} lines to the monitor, "
                      f"{sum(v[0] for v in got.values()):,} via run.logs(), {sum(v[3] for v in got.values()):,} / "
                      f"{expected_points * RANKS:,} points via run.metrics(); none lost or duplicated: "
                      f"{'yes' if lines_ok and points_ok else 'NO'}")
            results[label] = stats
            print(f"  widget messages/s {stats['msgs_per_s']:.1f} (target <= 10), bytes/s to the browser "
                  f"{stats['bytes_per_s'] / 1e3:.0f} KB (target < 500 KB), kernel CPU {stats['cpu_share'] * 100:.0f}% "
                  f"of a core (target < 25%), kernel RSS growth {stats['rss_growth_mb']:.0f} MB (target < 200 MB)",
                  flush=True)
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
    ours, naive = results["nbtrain monitor"], results["naive Output.append_stdout"]
    print("naive / nbtrain, same machine, same gang:")
    for key, name in (("msgs_per_s", "messages/s"), ("bytes_per_s", "bytes/s"), ("cpu_share", "kernel CPU")):
        print(f"  {name:12s} {naive[key] / max(ours[key], 1e-9):8.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
