"""`nbtrain validate`, `nbtrain debug`, `nbtrain logs --all -o` and `nbtrain env-diff` as real subprocesses on real
local gangs (issue 17, items 3 and 4). Runs are reused across assertions: each gang costs seconds."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from xml.etree import ElementTree

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RUNGS = ["config", "imports", "paths", "single-process", "distributed", "checkpoint", "resume"]

# Saves a checkpoint every step and resumes from the last one.
CHECKPOINTING = """%%distributed --nodes 1 --gpus 2 --name ckpt
import torch
import nbtrain
from accelerate import Accelerator
accelerator = Accelerator()
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
start = nbtrain.restore(accelerator)
for step in range(start, 1000):
    loss = model(torch.ones(8, 4)).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    nbtrain.save_checkpoint(accelerator, step)
    accelerator.log({"loss": loss.item()}, step=step)
"""
# The same, but a resumed attempt cannot load the checkpoint (the code "changed" since it was written).
BROKEN_RESUME = CHECKPOINTING.replace("""start = nbtrain.restore(accelerator)
""", """start = nbtrain.restore(accelerator)
if start > 0:
    raise RuntimeError(f"checkpoint of step {start - 1} has layout v1; this code loads v2 only")
""")
# 2 nodes x 2 processes; rank 1 raises after every rank printed the debug variables it sees.
FAILING = """%%distributed --nodes 2 --gpus 2 --name wobbly
import os
import time
from accelerate import Accelerator
accelerator = Accelerator()
names = ("TORCH_DISTRIBUTED_DEBUG", "PYTHONFAULTHANDLER", "NCCL_DEBUG")
print("DEBUGENV " + " ".join(f"{n}={os.environ.get(n)}" for n in names), flush=True)
time.sleep(3)  # the environment report (sent beside the code at start) gets out before the failure
if accelerator.process_index == 1:
    raise ValueError("rank one refuses")
accelerator.wait_for_everyone()
"""


def nbtrain(*args: str, timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m nbtrain ARGS` (with ``env`` added to this environment) and return the finished process."""
    return subprocess.run([sys.executable, "-m", "nbtrain", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def export(notebook: Path, out: Path) -> Path:
    done = nbtrain("export", str(notebook), "-o", str(out), "--json")
    assert done.returncode == 0, done.stderr
    return Path(json.loads(done.stdout)["directory"])


def export_cell(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / f"{name}.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell(source)]), str(path))
    return export(path, tmp_path / name)


def cases(xml_path: Path) -> dict[str, ElementTree.Element]:
    root = ElementTree.parse(xml_path).getroot()
    return {str(c.get("name")): c for c in root.iter("testcase")}


def test_validate_passes_the_exported_quickstart(home: Path, tmp_path: Path) -> None:
    job = export(EXAMPLES / "quickstart.ipynb", tmp_path / "quickstart-job")
    # at its defaults (10 steps, 300 s): at 1 x 2 the quickstart's epoch is 23 steps and it checkpoints at the end of
    # each, so the distributed rung runs on to step 22's checkpoint
    done = nbtrain("validate", str(job), "--junit", str(tmp_path / "junit.xml"))
    assert done.returncode == 0, done.stdout + done.stderr
    found = cases(tmp_path / "junit.xml")
    assert list(found) == RUNGS
    assert [n for n, c in found.items() if c.find("failure") is None and c.find("skipped") is None] == RUNGS, \
        done.stdout
    assert re.search(r"PASS single-process .*: 10 step\(s\) reported", done.stdout), done.stdout
    assert re.search(r"PASS distributed .*: 23 step\(s\) reported, on to its first checkpoint \(step 22\)",
                     done.stdout), done.stdout
    assert re.search(r"PASS checkpoint .*step 22 ", done.stdout), done.stdout
    assert re.search(r"PASS resume .*: run digits-\w+ attempt 1 resumed from step 22, continued at step 23",
                     done.stdout), done.stdout


def test_validate_passes_checkpoint_and_resume_of_a_job_that_checkpoints(home: Path, tmp_path: Path) -> None:
    job = export_cell(tmp_path, "ckpt", CHECKPOINTING)
    done = nbtrain("validate", str(job), "--steps", "3", "--junit", str(tmp_path / "junit.xml"))
    assert done.returncode == 0, done.stdout + done.stderr
    found = cases(tmp_path / "junit.xml")
    assert [n for n, c in found.items() if c.find("failure") is None and c.find("skipped") is None] == RUNGS
    # steps 0-2 saved; the new attempt restored step 2 and reported step 3 next (its own budget: 3 more steps)
    assert re.search(r"PASS resume .*: run ckpt-\w+ attempt 1 resumed from step 2, continued at step 3", done.stdout), \
        done.stdout


def test_validate_fails_the_resume_rung_of_a_job_whose_resume_is_broken(home: Path, tmp_path: Path) -> None:
    job = export_cell(tmp_path, "ckpt", BROKEN_RESUME)
    done = nbtrain("validate", str(job), "--steps", "3", "--junit", str(tmp_path / "junit.xml"))
    assert done.returncode == 1, done.stdout + done.stderr  # the job is broken, not the platform
    found = cases(tmp_path / "junit.xml")
    passed = [n for n, c in found.items() if c.find("failure") is None and c.find("skipped") is None]
    assert passed == RUNGS[:6], done.stdout
    assert "file(s) load" in done.stdout  # the checkpoint rung loaded the distributed run's last checkpoint
    failure = found["resume"].find("failure")
    assert failure is not None
    message = str(failure.get("message"))
    # both ranks raise it; whichever reported first is named (the rank and its node, as every failure)
    assert message.startswith("[job] run ckpt-") and re.search(r": rank [01] \(node 0\) failed: ", message), message
    assert "RuntimeError: checkpoint of step 2 has layout v1; this code loads v2 only" in message
    assert "raise RuntimeError" in (found["resume"].findtext("system-out") or "")  # the rank's traceback
    assert "nbtrain validate: resume failed (your job is broken): run ckpt-" in done.stderr


def test_debug_logs_zip_and_env_diff_of_a_failed_2x2_run(home: Path, tmp_path: Path) -> None:
    job = export_cell(tmp_path, "wobbly", FAILING)
    # the submitting process has a package its ranks do not see: a distribution on its PYTHONPATH only (the ranks
    # get PYTHONPATH emptied through --env)
    extra = tmp_path / "extra" / "nbtrain_probe_pkg-1.2.3.dist-info"
    extra.mkdir(parents=True)
    (extra / "METADATA").write_text("Metadata-Version: 2.1\nName: nbtrain-probe-pkg\nVersion: 1.2.3\n")
    failed = nbtrain("submit", str(job), "--wait", "--quiet", "--env", "PYTHONPATH=",
                     env={"PYTHONPATH": str(extra.parent)})
    assert failed.returncode == 1, failed.stdout + failed.stderr
    source = failed.stdout.split(":", 1)[0]

    debug = nbtrain("debug", source, "--wait", "--quiet")
    assert debug.returncode == 1, debug.stdout + debug.stderr  # the bug is still there, now at 1 x 2
    rerun = debug.stdout.split(":", 1)[0]
    assert f"debugging {source} at 1 node(s) x 2 process(es) on local (cpu)" in debug.stdout
    status = json.loads(nbtrain("status", rerun, "--json").stdout)
    assert (status["spec"]["nodes"], status["spec"]["procs_per_node"]) == (1, 2)
    assert status["spec"]["collective_timeout_s"] == 60.0
    for rank in (0, 1):
        log = nbtrain("logs", rerun, "--rank", str(rank)).stdout
        assert "DEBUGENV TORCH_DISTRIBUTED_DEBUG=DETAIL PYTHONFAULTHANDLER=1 NCCL_DEBUG=None" in log, log
    assert "DEBUGENV TORCH_DISTRIBUTED_DEBUG=None" in nbtrain("logs", source, "--rank", "0").stdout

    done = nbtrain("logs", source, "--all", "-o", str(tmp_path / "logs.zip"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "logs.zip").stat().st_mode & 0o777 == 0o600  # private, as the store it copies from
    assert not (tmp_path / "logs.zip.partial").exists()
    with zipfile.ZipFile(tmp_path / "logs.zip") as archive:
        names = set(archive.namelist())
        assert {f"logs/attempt-0/rank-{r}.log" for r in range(4)} <= names
        assert "DEBUGENV" in archive.read("logs/attempt-0/rank-3.log").decode()
        report = archive.read("failure.txt").decode()
        assert report.startswith("rank 1 (node 0) failed: ValueError: rank one refuses"), report
        assert json.loads(archive.read("status.json"))["state"] == "failed"
        assert set(json.loads(archive.read("environment.json"))) == {"0", "1", "2", "3"}

    # env-diff (run from a process without that package) compares the ranks with the submitter's record
    diff = nbtrain("env-diff", source)
    assert diff.returncode == 0, diff.stderr
    assert diff.stdout.startswith(f"{source}: 1 difference(s) between the submitting process and the ranks:"), diff.stdout
    # local rank 0 of each node (ranks 0 and 2) reports the node's packages
    assert "package nbtrain-probe-pkg: 1.2.3 at submit; absent on ranks 0, 2" in diff.stdout, diff.stdout
