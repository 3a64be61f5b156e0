"""The `nbtrain` command as a real subprocess (`python -m nbtrain`): every command, good and bad input."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import jsonschema
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

pytestmark = pytest.mark.slow

HELLO = """%%distributed --nodes 1 --gpus 2 --name hello
from accelerate import Accelerator
accelerator = Accelerator()
print(f"hello from rank {accelerator.process_index} of {accelerator.num_processes}, greeting={GREETING}")
accelerator.log({"answer": 42.0}, step=0)
"""
FAILING = """%%distributed --nodes 1 --gpus 2 --name broken
from accelerate import Accelerator
accelerator = Accelerator()
if accelerator.process_index == 1:
    raise ValueError("rank one refuses")
"""
LONG = """%%distributed --nodes 1 --gpus 2 --name long
import time
from accelerate import Accelerator
accelerator = Accelerator()
for i in range(600):
    print(f"tick {i}", flush=True)
    time.sleep(0.2)
"""


def nbtrain(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run `python -m nbtrain ARGS` and return the finished process."""
    return subprocess.run([sys.executable, "-m", "nbtrain", *args], capture_output=True, text=True, timeout=timeout)


def nbtrain_on_tty(*args: str) -> tuple[int, str, bytes]:
    """Run `python -m nbtrain ARGS` with stderr on a pseudo-terminal; return (exit code, stdout, terminal bytes)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "nbtrain", *args], stdout=subprocess.PIPE, stderr=slave, text=True)
    os.close(slave)
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO once the child has exited
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    out, _ = proc.communicate(timeout=180)
    reader.join(timeout=5)
    os.close(master)
    return proc.returncode, out, b"".join(chunks)


def export(tmp_path: Path, name: str, *cells: tuple[str, list[str]] | str) -> Path:
    sources = [c if isinstance(c, tuple) else (c, []) for c in cells]
    path = tmp_path / f"{name}.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell(s, metadata={"tags": t} if t else {}) for s, t in sources]),
                   str(path))
    done = nbtrain("export", str(path), "-o", str(tmp_path / name), "--json")
    assert done.returncode == 0, done.stderr
    return Path(json.loads(done.stdout)["directory"])


def one_line_error(done: subprocess.CompletedProcess[str], command: str) -> str:
    """The failure contract: a non-zero exit, stdout silent, stderr starting 'nbtrain COMMAND: reason'."""
    assert done.returncode != 0
    first = done.stderr.strip().splitlines()[0]
    assert first.startswith(f"nbtrain {command}: "), done.stderr
    return first


def test_export_submit_wait_and_inspect(home: Path, tmp_path: Path) -> None:
    job = export(tmp_path, "hello", ("GREETING = 'hi'", ["parameters"]), HELLO)
    exported = json.loads(nbtrain("export", str(tmp_path / "hello.ipynb"), "-o", str(job), "--json").stdout)
    assert exported["parameters"] == [{"name": "GREETING", "option": "--GREETING", "type": "str", "default": "hi"}]
    assert exported["spec"]["procs_per_node"] == 2 and "train.py" in exported["files"]

    done = nbtrain("submit", str(job), "--wait", "--param", "GREETING=bonjour")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split(":")[0]
    assert "succeeded" in done.stdout and "world size 2" in done.stdout

    runs = json.loads(nbtrain("runs", "--json").stdout)
    assert [r["id"] for r in runs] == [run_id] and runs[0]["state"] == "succeeded"
    schema = json.loads((Path(__file__).resolve().parents[2] / "nbtrain" / "schemas" / "run-summary.schema.json")
                        .read_text())
    jsonschema.validate(runs[0], schema)  # the one wire model, as in the REST API
    table = nbtrain("runs").stdout
    assert "RUN" in table and run_id in table and "1x2" in table

    status = json.loads(nbtrain("status", run_id[:8], "--json").stdout)
    assert status["state"] == "succeeded" and status["last_metrics"] == {"answer": 42.0}
    assert status["submitted_from"]["job_dir"] == str(job.resolve())
    assert "succeeded" in nbtrain("status", run_id).stdout

    logs = nbtrain("logs", run_id, "--rank", "1")
    assert logs.returncode == 0 and "hello from rank 1 of 2, greeting=bonjour" in logs.stdout
    assert "hello from rank 0" in nbtrain("logs", run_id, "--follow").stdout  # a finished run: prints, ends
    bad_rank = nbtrain("logs", run_id, "--rank", "5")
    assert bad_rank.returncode == 2 and "has ranks 0-1" in one_line_error(bad_rank, "logs")
    assert nbtrain("cancel", run_id).stdout.strip() == f"{run_id}: succeeded"  # idempotent on a finished run

    code, out, terminal = nbtrain_on_tty("resume", run_id, "--wait", "--json")  # a new attempt of the same run
    assert code == 0, terminal
    assert out.startswith(f"{run_id}: resumed")
    assert json.loads(out[out.index("{"):])["state"] == "succeeded"
    assert b"\r\x1b[K" + run_id.encode() in terminal  # on a TTY: one status line that rewrites itself

    plan = nbtrain("submit", str(job), "--dry-run", "--nodes", "2", "--gpus", "1", "--device", "cpu")
    assert plan.returncode == 0 and "2 node(s) x 1 process(es)" in plan.stdout
    assert len(json.loads(nbtrain("runs", "--json").stdout)) == 1  # a dry run submits nothing


def test_bad_input_gets_one_line_and_exit_code_2(home: Path, tmp_path: Path) -> None:
    job = export(tmp_path, "hello", ("GREETING = 'hi'", ["parameters"]), HELLO)
    for args, command, reason in [
        (("status", "nope-000000"), "status", "no run 'nope-000000'"),
        (("logs", "nope-000000"), "logs", "no run 'nope-000000'"),
        (("cancel", "nope-000000"), "cancel", "no run 'nope-000000'"),
        (("resume", "nope-000000"), "resume", "no run 'nope-000000'"),
        (("rerun", "nope-000000"), "rerun", "no run 'nope-000000'"),
        (("rerun",), "rerun", "there is no failed run to re-run; name one: nbtrain rerun RUN"),
        (("submit", str(tmp_path / "absent")), "submit", "is missing, not a job directory"),
        (("submit", str(tmp_path)), "submit", "not an nbtrain job directory (no nbtrain.toml)"),
        (("submit", str(job), "--param", "EPOCHS=3"), "submit", "no parameter 'EPOCHS'; parameters: GREETING"),
        (("submit", str(job), "--param", "GREETING"), "submit", "write it as NAME=VALUE"),
        (("submit", str(job), "--strategy", "magic"), "submit", "--strategy: unknown value 'magic'"),
        (("export", str(tmp_path / "absent.ipynb")), "export", "it is missing"),
        (("manifests", str(job), "--flavor", "helm"), "manifests", "--flavor: unknown value 'helm'"),
    ]:
        done = nbtrain(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert reason in one_line_error(done, command), (args, done.stderr)

    toml = job / "nbtrain.toml"
    toml.write_text(toml.read_text().replace("nodes = 1", "nodes = one"))
    done = nbtrain("submit", str(job))
    assert done.returncode == 2 and "not valid TOML" in one_line_error(done, "submit")
    line = next(i for i, text in enumerate(toml.read_text().splitlines(), 1) if text.startswith("nodes"))
    assert f"line {line}" in done.stderr

    usage = nbtrain("submit")
    assert usage.returncode == 2 and "the following arguments are required: directory" in usage.stderr
    assert nbtrain("frobnicate").returncode == 2
    assert json.loads(nbtrain("runs", "--json").stdout) == []


def test_manifests_print_yaml_or_say_why(home: Path, tmp_path: Path) -> None:
    job = export(tmp_path, "k8s", "%%distributed --nodes 2 --gpus 2 --name k8s --image python:3.11\nprint(1)")
    done = nbtrain("manifests", str(job))
    if done.returncode == 0:  # the kubernetes backend is installed: real manifests
        import yaml

        documents = [d for d in yaml.safe_load_all(done.stdout) if d]
        assert documents and all("kind" in d for d in documents)
        assert (job / "k8s" / "job.yaml").is_file()
    else:
        assert done.returncode == 2
        assert "kubernetes backend is not available" in one_line_error(done, "manifests")
        assert "kubernetes backend is not available" in (job / "k8s" / "README.md").read_text()


def test_doctor_json(home: Path) -> None:
    done = nbtrain("doctor", "--json")
    checks = {c["name"]: c for c in json.loads(done.stdout)}
    assert {"python", "torch", "accelerate", "devices", "store", "kubernetes", "tracking"} <= set(checks)
    assert done.returncode == (0 if all(c["ok"] for c in checks.values()) else 1)
    assert "store" in nbtrain("doctor").stdout


def test_failed_run_exit_code_and_reason_then_rerun(home: Path, tmp_path: Path) -> None:
    job = export(tmp_path, "broken", FAILING)
    done = nbtrain("submit", str(job), "--wait", "--json")
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    run_id = done.stdout.split(":")[0]
    # not a TTY: progress as plain lines (no carriage returns), then the one-line reason
    assert lines[0].startswith(f"{run_id}: starting") and "\r" not in done.stderr
    reason = next(line for line in lines if line.startswith("nbtrain submit: "))
    assert f"run {run_id} failed: rank 1" in reason and "ValueError: rank one refuses" in reason
    status = json.loads(done.stdout[done.stdout.index("{"):])
    assert status["state"] == "failed" and status["failed_rank"] == 1 and status["failure_detail"]["rank"] == 1

    # `nbtrain rerun` (as `%nbtrain rerun`): the newest failed run again as a new run, its options overridden; with
    # one process there is no rank 1 to fail
    again = nbtrain("rerun", "--gpus", "1", "--wait", "--json")
    assert again.returncode == 0, again.stderr
    rerun_id = again.stdout.split(":")[0]
    assert rerun_id != run_id and again.stdout.startswith(f"{rerun_id}: started, a rerun of {run_id} (1 node(s) x 1")
    rerun = json.loads(again.stdout[again.stdout.index("{"):])
    assert rerun["state"] == "succeeded" and rerun["spec"]["procs_per_node"] == 1


def _wait_for(predicate: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_follow_and_cancel_a_running_job(home: Path, tmp_path: Path) -> None:
    job = export(tmp_path, "long", LONG)
    waiting = subprocess.Popen([sys.executable, "-m", "nbtrain", "submit", str(job), "--wait", "--quiet"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert waiting.stdout is not None
        run_id = waiting.stdout.readline().split(":")[0]
        follow = subprocess.Popen([sys.executable, "-m", "nbtrain", "logs", run_id, "--follow"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert follow.stdout is not None
        assert follow.stdout.readline().startswith("tick ")  # lines arrive while the run is going
        assert json.loads(nbtrain("status", run_id, "--json").stdout)["state"] == "running"
        cancelled = nbtrain("cancel", run_id)
        assert cancelled.returncode == 0 and cancelled.stdout.strip() == f"{run_id}: cancelled"
        assert follow.wait(timeout=30) == 0  # --follow ends with the run
        assert waiting.wait(timeout=30) == 3  # submit --wait: exit code 3 = cancelled
    finally:
        for proc in (waiting, locals().get("follow")):
            if proc is not None and proc.poll() is None:
                proc.kill()
