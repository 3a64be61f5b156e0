"""Paged log reads on a 1 GB rank log: in the kernel (``read_page``) and through a real jupyter_server.

Writes a 1 GB rank log (~100-byte lines) into a run of a fresh store under /tmp, then measures, side by side:

- ``read_page(path, -100, 100)``: the last 100 lines, in this process (what ``run.logs(tail=100)`` costs);
- ``GET /nbtrain/runs/<id>/logs/0?offset=-1000&limit=1000``: the last 1,000 lines over REST;
- ``GET /nbtrain/runs/<id>/logs/0?offset=<middle>&limit=1000``: 1,000 lines from the middle over REST;

each as the median of N calls in ms (the first, cold call is printed too: a read by line number indexes the
file once), plus the growth of the server process's resident memory (VmRSS) over all the REST calls.
Targets: every median under 50 ms, RSS growth under 20 MB; the script exits 1 when one is missed.
The server binds 127.0.0.1 only; every process started here is ended by its PID and the files are removed.

Usage: python bench/logs.py [--gb 1.0] [-n 21]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TARGET_MS = 50.0
TARGET_RSS_MB = 20.0
LINE = b"[rank0]:2025-01-01 12:00:00 step %09d loss=0.4183 lr=3.0e-04 grad_norm=1.2345 tokens/s=51234.5 ok\n"


def write_log(path: Path, size: int) -> int:
    """A log of about ``size`` bytes of numbered lines, written as one repeated 1 MiB block; its line count."""
    per_block = (1 << 20) // len(LINE % 0)
    block = b"".join(LINE % i for i in range(per_block))
    blocks = max(1, size // len(block))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        for _ in range(blocks):
            handle.write(block)
    return blocks * per_block


def expected_line(number: int) -> str:
    """The text of line ``number`` of the generated log."""
    per_block = (1 << 20) // len(LINE % 0)
    return (LINE % (number % per_block)).decode().rstrip("\n")


def timed(fn: Callable[[], Any], n: int) -> tuple[float, float, Any]:
    """(first call ms, median of the next ``n`` calls in ms, last result)."""
    t0 = time.perf_counter()
    result = fn()
    first = (time.perf_counter() - t0) * 1000
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - t0) * 1000)
    return first, statistics.median(times), result


def rss_mb(pid: int) -> float:
    """VmRSS of ``pid`` in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_store(home: Path, gb: float) -> tuple[str, Path, int]:
    """A store with one finished run whose rank-0 log is ~``gb`` GB, plus a small run to warm the server up."""
    from nbtrain.spec import JobSpec
    from nbtrain.store import RunRecord, Store

    store = Store(home)
    run_ids = ("benchlogs-000001", "warmup-000001")
    for run_id in run_ids:
        store.save(RunRecord(run_id, JobSpec(name=run_id.split("-")[0], procs_per_node=1), "0" * 64, "local",
                             handle={"attempt": 0}, state="succeeded", ended=time.time()))
    small = store.attempt_dir(run_ids[1], 0) / "logs" / "rank-0.log"
    write_log(small, 1 << 20)
    log = store.attempt_dir(run_ids[0], 0) / "logs" / "rank-0.log"
    t0 = time.perf_counter()
    lines = write_log(log, int(gb * (1 << 30)))
    print(f"wrote {log.stat().st_size / 1e9:.2f} GB, {lines:,} lines in {time.perf_counter() - t0:.1f} s", flush=True)
    return run_ids[0], log, lines


def start_server(tmp: Path, home: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    """A jupyter_server with the nbtrain extension on 127.0.0.1, token-protected; (process, base url, token)."""
    token = secrets.token_hex(16)
    port = free_port()
    config = tmp / "jupyter-config"
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(json.dumps({"ServerApp": {
        "jpserver_extensions": {"nbtrain": True}, "ip": "127.0.0.1", "port": port, "port_retries": 0,
        "open_browser": False, "allow_root": True, "root_dir": str(tmp), "token": token}}))
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config), "JUPYTER_DATA_DIR": str(tmp / "jupyter-data"),
           "JUPYTER_RUNTIME_DIR": str(tmp / "jupyter-runtime"), "NBTRAIN_HOME": str(home), "NBTRAIN_TRACKING": "0"}
    with open(tmp / "server.log", "wb") as server_log:
        server = subprocess.Popen([sys.executable, "-m", "jupyter_server"], env=env, cwd=tmp,
                                  stdout=subprocess.DEVNULL, stderr=server_log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            get(url, token, "/api/status")
            return server, url, token
        except (OSError, http.client.HTTPException) as error:
            if server.poll() is not None or time.monotonic() > deadline:
                stop(server)
                log = (tmp / "server.log").read_text()[-3000:]
                raise RuntimeError(f"jupyter server did not start:\n{log}") from error
            time.sleep(0.2)


_CONNECTIONS: dict[str, http.client.HTTPConnection] = {}


def get(url: str, token: str, path: str) -> Any:
    """GET ``path`` as JSON over one kept-alive connection per server (as a browser does)."""
    connection = _CONNECTIONS.get(url)
    if connection is None:
        host, port = url.removeprefix("http://").split(":")
        connection = _CONNECTIONS[url] = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request("GET", path, headers={"Authorization": f"token {token}"})
        response = connection.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException):
        connection.close()
        del _CONNECTIONS[url]
        raise
    if response.status != 200:
        raise OSError(f"GET {path}: HTTP {response.status}: {body[:300]!r}")
    return json.loads(body)


def stop(process: subprocess.Popen[bytes]) -> None:
    """End ``process`` (by its PID): SIGTERM, then SIGKILL after 10 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=1.0, help="size of the rank log (default 1.0)")
    parser.add_argument("-n", type=int, default=21, help="timed calls per measurement after the first (default 21)")
    args = parser.parse_args()
    from nbtrain.logpage import clear_index_cache, read_page

    tmp = Path(tempfile.mkdtemp(prefix="nbtrain-bench-logs-", dir="/tmp"))
    server: subprocess.Popen[bytes] | None = None
    rows: list[tuple[str, float, float, str]] = []
    failures: list[str] = []
    try:
        home = tmp / "home"
        run_id, log, total = make_store(home, args.gb)
        middle = total // 2

        clear_index_cache()
        first, median, page = timed(lambda: read_page(log, -100, 100), args.n)
        assert list(page.lines) == [expected_line(i) for i in range(total - 100, total)], "wrong tail"
        rows.append(("read_page(path, -100, 100) in-process", first, median, f"start={page.start} total={page.total}"))
        clear_index_cache()
        first, median, page = timed(lambda: read_page(log, middle, 1000), args.n)
        assert page.lines[0] == expected_line(middle) and page.total == total, "wrong middle page"
        rows.append(("read_page(path, middle, 1000) in-process", first, median, "first call indexes the file"))

        server, url, token = start_server(tmp, home)
        get(url, token, "/nbtrain/runs/warmup/logs/0?offset=10&limit=1000")  # imports, first handle built
        get(url, token, "/nbtrain/runs/warmup/logs/0?offset=-1000&limit=1000")
        rss_before = rss_mb(server.pid)
        base = f"/nbtrain/runs/{run_id}/logs/0"
        first, median, body = timed(lambda: get(url, token, f"{base}?offset=-1000&limit=1000"), args.n)
        assert body["lines"] == [expected_line(i) for i in range(total - 1000, total)], "wrong REST tail"
        rows.append(("GET logs/0?offset=-1000&limit=1000", first, median,
                     f"offset={body['offset']} total={body['total']}"))
        first, median, body = timed(lambda: get(url, token, f"{base}?offset={middle}&limit=1000"), args.n)
        assert body["lines"][0] == expected_line(middle) and body["total"] == total, "wrong REST middle page"
        rows.append((f"GET logs/0?offset={middle}&limit=1000", first, median, "first call indexes the file"))
        _, median_after, body = timed(lambda: get(url, token, f"{base}?offset=-1000&limit=1000"), args.n)
        rows.append(("GET logs/0?offset=-1000&limit=1000 (indexed)", float("nan"), median_after,
                     f"offset={body['offset']} total={body['total']}"))
        rss_growth = rss_mb(server.pid) - rss_before
    finally:
        for connection in _CONNECTIONS.values():
            connection.close()
        if server is not None:
            stop(server)
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\n{'measurement':<48} {'first ms':>9} {'median ms':>10}  note")
    for name, first, median, note in rows:
        print(f"{name:<48} {first:>9.1f} {median:>10.1f}  {note}")
        if not median < TARGET_MS:
            failures.append(f"{name}: median {median:.1f} ms >= {TARGET_MS:.0f} ms")
    print(f"{'server RSS growth over all REST calls (MB)':<48} {'':>9} {rss_growth:>10.1f}  "
          f"target < {TARGET_RSS_MB:.0f} MB (before: {rss_before:.0f} MB)")
    if not rss_growth < TARGET_RSS_MB:
        failures.append(f"server RSS grew {rss_growth:.1f} MB >= {TARGET_RSS_MB:.0f} MB")
    print(f"(N = {args.n} timed calls after the first; target: medians < {TARGET_MS:.0f} ms; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f})")
    for failure in failures:
        print("MISSED:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
