"""Monitor throughput: what watching a run costs the kernel, and whether every line and point arrives once.

A synthetic gang (writer processes standing in for the ranks, a synthetic supervisor) writes what a real
gang writes (per-rank logs and event files, a live status) into a run of the store; a real ipykernel
attaches to it and displays the monitor widget. This script plays the front end: it counts the widget's
iopub messages and bytes, checks every batch message (no batch missed, each line sent at most once and
numbered as in its log, every rank-0 point exactly once), samples the kernel's CPU time and resident memory,
and afterwards asks the kernel what it holds (lines counted per rank, points folded per rank).

Targets (issue 12); the exit status is 1 when one is missed:
  kernel CPU <= 15% of a core, kernel RSS growth <= 50 MB, <= 10 widget messages/s, 0 lines or points
  lost or duplicated.

Usage:
  python bench/stream.py                                   # 16 ranks, 100,000 lines/s + 1,000 points/s, 20 s
  python bench/stream.py --ranks 512 --lines-per-s 1000000 # 64 nodes x 8, same targets
  python bench/stream.py --soak 600                        # 10 minutes at 100,000 lines/s: memory stays flat

MLflow tracking is as the environment says (on unless NBTRAIN_TRACKING=0; the store is MLFLOW_TRACKING_URI, by
default a sqlite file beside the bench's NBTRAIN_HOME); the line printed first says which.
``--naive-seconds N`` also watches the same gang the naive way (a thread printing every line into an
ipywidgets.Output) for comparison (default: 5 s at the default size, skipped otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TARGET_CPU = 0.15  # of one core
TARGET_RSS_MB = 50.0
TARGET_MSGS_PER_S = 10.0
PROCS_PER_NODE = 8
MAX_WRITERS = 16

WRITER = r'''
import os, sys, time
from pathlib import Path
from nbtrain.events import EventKind, EventWriter
attempt_dir, seconds, lines_per_s, points_per_s = Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
ranks = [int(r) for r in sys.argv[5].split(",")]
procs = int(sys.argv[6])
logs = {r: os.open(attempt_dir / "logs" / f"rank-{r}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600) for r in ranks}
events = {r: EventWriter(attempt_dir / "events" / f"rank-{r}.jsonl", f"rank-{r}", rank=r) for r in ranks}
for r in ranks:
    events[r].emit(EventKind.RANK_START, node=r // procs, local_rank=r % procs, pid=os.getpid(), host="synthetic")
total_lines, total_points = int(seconds * lines_per_s), int(seconds * points_per_s)
written = dict.fromkeys(ranks, 0); emitted = dict.fromkeys(ranks, 0)
def lines(r, start, stop):
    return b"".join([b"rank %03d line %09d loss is going down nicely\n" % (r, i) for i in range(start, stop)])
start = time.monotonic()
while True:
    elapsed = time.monotonic() - start
    for r in ranks:
        due = min(int(elapsed * lines_per_s), total_lines)
        if due > written[r]:
            os.write(logs[r], lines(r, written[r], due)); written[r] = due
        due = min(int(elapsed * points_per_s), total_points)
        while emitted[r] < due:
            events[r].emit(EventKind.METRIC, step=emitted[r], values={"loss": 1.0 / (emitted[r] + 1)}); emitted[r] += 1
    if elapsed >= seconds:
        break
    time.sleep(0.01)
for r in ranks:
    events[r].emit(EventKind.RANK_DONE, ok=True, has_result=False, step=total_points - 1)
'''

SUPERVISOR = r'''
import os, subprocess, sys, time
from pathlib import Path
from nbtrain.events import EventKind, EventWriter
from nbtrain.store import write_json_atomic
attempt_dir, seconds, writer = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
ranks, lines, points, writers, procs = int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7]), sys.argv[8]
(attempt_dir / "logs").mkdir(parents=True, exist_ok=True)
out = EventWriter(attempt_dir / "events" / "supervisor.jsonl", "supervisor")
def status(state, ended=None):
    write_json_atomic(attempt_dir / "status.json", {"state": state, "attempt": 0, "started": started, "ended": ended,
                      "failure": None, "supervisor_pid": os.getpid(), "launchers": [], "updated": time.time()})
started = time.time(); status("running"); out.emit(EventKind.STATE, state="starting", reason="")
out.emit(EventKind.STATE, state="running", reason="")
groups = [",".join(str(r) for r in range(w, ranks, writers)) for w in range(writers)]
begun = time.monotonic()
procs_ = [subprocess.Popen([sys.executable, "-c", writer, str(attempt_dir), seconds, str(lines / ranks), str(points / ranks),
                            group, procs]) for group in groups]
codes = [p.wait() for p in procs_]
(attempt_dir / "writing_s").write_text(str(time.monotonic() - begun))
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

# what the kernel holds once the run ended: per rank [lines counted, newest line kept, points folded, lines on disk],
# and the points the rank-0 chart took
KERNEL_REPORT = '''[{{r: [m.line_counts.get(r, 0), (m.recent(r) or [[None, ""]])[-1][1],
       getattr(run.view.metrics.get(r, {{}}).get("loss"), "added", 0), run.log_page(r, 0, 0).total]
   for r in range({ranks})}}, getattr(m.series.get("loss"), "added", 0)]'''
_LINE = re.compile(r"rank (\d+) line (\d+) ")


@dataclass
class FrontEnd:
    """What the browser would have received, checked as it arrives."""

    ranks: int
    msgs: int = 0
    bytes: int = 0
    batches: int = 0
    seq: int = 0
    seq_gaps: int = 0
    lines: int = 0
    misnumbered: int = 0
    resent: int = 0
    last_index: dict[int, int] = field(default_factory=dict)
    steps: list[float] = field(default_factory=list)

    def take(self, msg: dict[str, Any]) -> None:
        if msg["msg_type"] not in ("comm_msg", "stream", "update_display_data", "display_data"):
            return
        self.msgs += 1
        self.bytes += len(json.dumps(msg["content"], default=str)) + sum(len(b) for b in msg.get("buffers") or [])
        data = msg["content"].get("data") or {}
        content = data.get("content") if isinstance(data, dict) and data.get("method") == "custom" else None
        if not isinstance(content, dict) or content.get("type") != "batch":
            return
        self.batches += 1
        self.seq_gaps += int(content["seq"] != self.seq + 1)
        self.seq = content["seq"]
        for rank, index, text in content["lines"]:
            self.lines += 1
            match = _LINE.match(text)
            self.misnumbered += int(match is None or int(match.group(1)) != rank or int(match.group(2)) != index)
            self.resent += int(index <= self.last_index.get(rank, -1))  # a rank's lines come newest-first, once
            self.last_index[rank] = index
        self.steps.extend(p[0] for p in content["points"].get("loss", []))


def _proc_stats(pid: int) -> tuple[float, int]:
    """(CPU seconds, resident bytes) of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    return cpu, rss


def _make_run(ranks: int) -> tuple[str, Path]:
    from nbtrain.spec import JobSpec
    from nbtrain.store import RunRecord, Store

    store = Store()
    run_id = store.new_run_id("stream")
    nodes, procs = (ranks // PROCS_PER_NODE, PROCS_PER_NODE) if ranks % PROCS_PER_NODE == 0 else (1, ranks)
    spec = JobSpec(name="stream", nodes=nodes, procs_per_node=procs, device="cpu")
    store.save(RunRecord(run_id=run_id, spec=spec, bundle_digest="0" * 64, backend="local"))
    return run_id, store.attempt_dir(run_id, 0)


def _watch(kernel_code: str, attempt_dir: Path, args: argparse.Namespace, seconds: float, km: Any, kc: Any,
           front: FrontEnd) -> dict[str, Any]:
    pid = km.provisioner.pid if hasattr(km, "provisioner") and km.provisioner else km.kernel.pid
    writers = min(args.ranks, MAX_WRITERS)
    procs = str(PROCS_PER_NODE if args.ranks % PROCS_PER_NODE == 0 else args.ranks)
    supervisor = subprocess.Popen([sys.executable, "-c", SUPERVISOR, str(attempt_dir), str(seconds), WRITER,
                                   str(args.ranks), str(args.lines_per_s), str(args.points_per_s), str(writers), procs])
    time.sleep(0.5)
    kc.execute(kernel_code)
    spy = _py_spy(pid, args.py_spy, seconds) if getattr(args, "py_spy", None) else None
    cpu0, rss0 = _proc_stats(pid)
    t0 = time.monotonic()
    peak_rss = rss0
    samples: list[tuple[float, float]] = []
    next_sample = t0
    deadline = t0 + seconds + 60
    while time.monotonic() < deadline and (supervisor.poll() is None or time.monotonic() - t0 < seconds):
        try:
            msg = kc.get_iopub_msg(timeout=0.5)
        except queue.Empty:
            msg = None
        if msg is not None:
            front.take(msg)
        now = time.monotonic()
        if now >= next_sample:
            rss = _proc_stats(pid)[1]
            peak_rss = max(peak_rss, rss)
            samples.append((now - t0, (rss - rss0) / 1e6))
            next_sample = now + 0.25
    elapsed = time.monotonic() - t0
    cpu1, _ = _proc_stats(pid)
    supervisor.wait(timeout=120)
    if spy is not None:
        spy.wait(timeout=60)
        _print_profile(Path(args.py_spy))
    writing = float((attempt_dir / "writing_s").read_text()) if (attempt_dir / "writing_s").exists() else seconds
    return {"seconds": elapsed, "msgs_per_s": front.msgs / elapsed, "bytes_per_s": front.bytes / elapsed,
            "cpu_share": (cpu1 - cpu0) / elapsed, "rss_growth_mb": (peak_rss - rss0) / 1e6, "writing_s": writing,
            "rss_curve": samples}


def _py_spy(pid: int, out: str, seconds: float) -> subprocess.Popen[bytes]:
    """Sample the kernel's threads (py-spy, 50 Hz, without pausing it) while the gang writes, into ``out``."""
    return subprocess.Popen(["py-spy", "record", "-p", str(pid), "-d", str(max(1, int(seconds) - 1)), "-r", "50",
                             "-f", "raw", "--nonblocking", "-o", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _print_profile(path: Path, top: int = 12) -> None:
    """The functions the kernel was seen in most (py-spy's raw format: ``frame;frame;... count`` per stack)."""
    if not path.exists():
        print(f"  py-spy wrote no profile to {path} (is py-spy installed, may it ptrace the kernel?)")
        return
    own: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        total += int(count)
        frame = stack.rsplit(";", 1)[-1]
        own[frame] = own.get(frame, 0) + int(count)
    print(f"  py-spy: {total} samples of busy kernel threads; where they were (own time):")
    for frame, count in sorted(own.items(), key=lambda item: -item[1])[:top]:
        print(f"    {count / max(total, 1) * 100:5.1f}%  {frame}")


def _drain(kc: Any, front: FrontEnd, quiet_s: float = 1.0) -> None:
    """Take what the kernel still sends (the final flush) until it is quiet."""
    while True:
        try:
            front.take(kc.get_iopub_msg(timeout=quiet_s))
        except queue.Empty:
            return


def _execute(kc: Any, code: str, take: Any, timeout: float = 300) -> dict[str, Any]:
    """Run ``code`` in the kernel and hand EVERY iopub message to ``take`` until it is done; the shell reply.

    Not ``execute_interactive``: it drops the messages of other requests, and the watcher thread's widget messages
    belong to the cell that displayed the monitor (one lost there would read as a batch the front end missed).
    """
    msg_id = kc.execute(code)
    deadline = time.monotonic() + timeout
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.0, deadline - time.monotonic()))
        take(msg)
        if (msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "status"
                and msg["content"]["execution_state"] == "idle"):
            break
    reply: dict[str, Any] = kc.get_shell_msg(timeout=max(1.0, deadline - time.monotonic()))
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kc.get_shell_msg(timeout=max(1.0, deadline - time.monotonic()))
    return reply


def _kernel_value(kc: Any, expression: str, front: FrontEnd, timeout: float = 300) -> Any:
    collected: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            collected.extend(line[2:] for line in msg["content"]["text"].splitlines() if line.startswith("@@"))
        else:
            front.take(msg)

    reply = _execute(kc, f"import json\nprint('@@' + json.dumps({expression}))", hook, timeout=timeout)
    assert reply["content"]["status"] == "ok", reply["content"]
    return json.loads(collected[-1])


def _measure(args: argparse.Namespace, seconds: float) -> tuple[dict[str, Any], list[str]]:
    """Watch one synthetic gang with the monitor; returns the numbers and the targets missed."""
    from jupyter_client.manager import start_new_kernel

    run_id, attempt_dir = _make_run(args.ranks)
    km, kc = start_new_kernel(kernel_name="python3")
    front = FrontEnd(args.ranks)
    missed: list[str] = []
    try:
        kc.execute_interactive("import nbtrain.client, ipywidgets", timeout=60)
        tracking = _kernel_value(kc, "__import__('nbtrain.spec').spec.tracking_default()", front)
        print(f"nbtrain monitor: {args.ranks} ranks, {args.lines_per_s:,.0f} lines/s + {args.points_per_s:,.0f} points/s "
              f"for {seconds:.0f} s; MLflow tracking {'on' if tracking else 'off (NBTRAIN_TRACKING=0)'}; "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} …", flush=True)
        stats = _watch(WATCH_NBTRAIN.format(run_id=run_id), attempt_dir, args, seconds, km, kc, front)
        _execute(kc, "run.wait(progress=False);", front.take, timeout=300)
        _drain(kc, front)
        got, charted = _kernel_value(kc, "(lambda m: " + KERNEL_REPORT.format(ranks=args.ranks) + ")(run.monitor()._model)",
                                     front)
        held = _kernel_value(kc, "sum(len(b.data) for r in run.monitor()._model.logs.rings.values() for b in r.blocks)",
                             front)
        lines_each, points_each = int(seconds * (args.lines_per_s / args.ranks)), int(seconds * (args.points_per_s / args.ranks))
        counted = sum(v[0] for v in got.values())
        wrong_count = sum(1 for v in got.values() if v[0] != lines_each)
        wrong_newest = sum(1 for r, v in got.items() if lines_each and v[1] != f"rank {int(r):03d} line {lines_each - 1:09d} "
                           "loss is going down nicely")
        folded = sum(v[2] for v in got.values())
        wrong_points = sum(1 for v in got.values() if v[2] != points_each)
        on_disk = sum(v[3] or 0 for v in got.values())
        # the chart's first points were in the widget before it was displayed (the snapshot carries them);
        # every later one came in exactly one batch
        rank0 = sorted(front.steps)
        chart_ok = charted == points_each and rank0 == [float(s) for s in range(points_each - len(rank0), points_each)]
        lost_lines = abs(lines_each * args.ranks - counted) + wrong_count + wrong_newest + front.misnumbered + front.resent
        lost_points = abs(points_each * args.ranks - folded) + wrong_points + (0 if chart_ok else 1)
        rate = lines_each * args.ranks / max(stats["writing_s"], 1e-9)
        print(f"  written: {lines_each * args.ranks:,} lines ({on_disk:,} on disk) in {stats['writing_s']:.1f} s "
              f"({rate:,.0f} lines/s achieved), {points_each * args.ranks:,} points")
        print(f"  kernel: {counted:,} lines counted by the monitor ({wrong_count} ranks off, {wrong_newest} with a wrong "
              f"newest line), {folded:,} points folded ({wrong_points} ranks off); its rings hold {held / 1e6:.1f} MB of lines")
        print(f"  front end: {front.batches} batches ({front.seq_gaps} missed), {front.lines:,} lines shown "
              f"({front.misnumbered} misnumbered, {front.resent} sent twice), rank-0 chart {charted:,} / "
              f"{points_each:,} points, {len(front.steps):,} of them in batches ({'each once' if chart_ok else 'NOT each once'})")
        curve = stats.pop("rss_curve")
        if seconds >= 60 and curve:
            marks = [curve[min(len(curve) - 1, int(len(curve) * f))] for f in (0.25, 0.5, 0.75, 1.0)]
            print("  kernel RSS growth over time: " + ", ".join(f"{t:.0f} s {mb:+.0f} MB" for t, mb in marks))
        checks = [
            ("kernel CPU", stats["cpu_share"] * 100, TARGET_CPU * 100, "% of a core"),
            ("kernel RSS growth", stats["rss_growth_mb"], TARGET_RSS_MB, " MB"),
            ("widget messages/s", stats["msgs_per_s"], TARGET_MSGS_PER_S, ""),
            ("lines lost or duplicated", lost_lines, 0, ""),
            ("points lost or duplicated", lost_points, 0, ""),
        ]
        for name, value, target, unit in checks:
            ok = value <= target
            print(f"  {name:26s} {value:10.1f}{unit:12s} target <= {target:g}{unit}  {'ok' if ok else 'MISSED'}")
            if not ok:
                missed.append(name)
        print(f"  bytes/s to the browser {stats['bytes_per_s'] / 1e3:.0f} KB", flush=True)
        return stats, missed
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _naive(args: argparse.Namespace, seconds: float) -> dict[str, Any]:
    from jupyter_client.manager import start_new_kernel

    _, attempt_dir = _make_run(args.ranks)
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        kc.execute_interactive("import nbtrain.client, ipywidgets", timeout=60)
        print(f"naive Output.append_stdout: the same gang for {seconds:.0f} s …", flush=True)
        stats = _watch(WATCH_NAIVE.format(attempt_dir=str(attempt_dir), seconds=seconds), attempt_dir, args, seconds,
                       km, kc, FrontEnd(args.ranks))
        stats.pop("rss_curve")
        print(f"  widget messages/s {stats['msgs_per_s']:.1f}, bytes/s {stats['bytes_per_s'] / 1e3:.0f} KB, "
              f"kernel CPU {stats['cpu_share'] * 100:.0f}% of a core, RSS growth {stats['rss_growth_mb']:.0f} MB")
        return stats
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20, help="how long the gang writes (default 20)")
    parser.add_argument("--ranks", type=int, default=16, help="ranks of the synthetic gang (default 16)")
    parser.add_argument("--lines-per-s", type=float, default=100_000, help="log lines a second, all ranks together")
    parser.add_argument("--points-per-s", type=float, default=1_000, help="metric points a second, all ranks together")
    parser.add_argument("--soak", type=float, default=0, metavar="SECONDS",
                        help="a long run instead (e.g. 600): kernel memory must stay within the RSS target")
    parser.add_argument("--py-spy", metavar="FILE", default=None,
                        help="also profile the kernel while the gang writes (py-spy raw format into FILE; needs py-spy)")
    parser.add_argument("--naive-seconds", type=float, default=None,
                        help="also watch naively for this long (default 5 at the default size, else 0)")
    args = parser.parse_args()
    seconds = args.soak or args.seconds
    naive = args.naive_seconds
    if naive is None:
        naive = 5.0 if (args.ranks == 16 and args.lines_per_s == 100_000 and not args.soak) else 0.0
    # Everything the bench writes (the gang's logs: a GB a run at 512 ranks; MLflow's store and its artifacts, which
    # land in ./mlruns of the working directory) goes to a scratch directory, removed at the end.
    if args.py_spy:
        args.py_spy = os.path.abspath(args.py_spy)  # named from here, kept after the scratch directory goes
    with tempfile.TemporaryDirectory(prefix="nbtrain-stream-") as scratch:
        os.chdir(scratch)
        os.environ.setdefault("NBTRAIN_HOME", os.path.join(scratch, "home"))
        # with tracking on, the run's tracking agent (a process beside the run, not the kernel) writes here
        os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{scratch}/mlflow.db")
        ours, missed = _measure(args, seconds)
        if naive > 0:
            theirs = _naive(args, naive)
            print("naive / nbtrain, same machine, same gang:")
            for key, name in (("msgs_per_s", "messages/s"), ("bytes_per_s", "bytes/s"), ("cpu_share", "kernel CPU")):
                print(f"  {name:12s} {theirs[key] / max(ours[key], 1e-9):8.1f}x")
    if missed:
        print("targets missed: " + ", ".join(missed))
        return 1
    print("all targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
