"""Runs outlive whoever follows them: a killed controller or a killed kernel never loses a verdict or a line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from helpers import BackendUnderTest, LineCollector, settle, wait_for, wait_for_line

from nbtrain.model import RunState

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

SLEEP_CELL = '''import time
print("ready", flush=True)
for _ in range({ticks}):
    time.sleep(0.1)
42
'''


def test_a_killed_controller_never_leaves_a_terminal_run_with_live_processes(under_test: BackendUnderTest) -> None:
    # the gang must outlive the 15 s window when its controller owns it, or "no process left" proves nothing
    ticks = 60 if under_test.gang_outlives_controller else 300
    run = under_test.submit(SLEEP_CELL.format(ticks=ticks), name="orphaned", procs_per_node=2)
    wait_for_line(under_test, run.id, "ready", timeout=60)
    run.stop_watching()  # the kernel that submitted it is gone: nobody in this process follows the run any more
    under_test.kill_controller(run)
    killed = time.monotonic()

    if under_test.gang_outlives_controller:
        alive = under_test.processes(run.id)
        again = under_test.attach(run.id)  # a new kernel
        state = again.status()
        assert alive, "the gang died with the process that followed it"
        assert not state.terminal, f"run {run.id} is reported {state.value} while its processes {alive} still run"
        assert again.wait(timeout=60, progress=False) is RunState.SUCCEEDED
        assert again.result(timeout=10) == 42
        left = settle(lambda: under_test.processes(run.id), 5)
        assert not left, f"run {run.id} SUCCEEDED but processes {left} still run"
        return

    again = under_test.attach(run.id)

    def verdict() -> RunState | None:
        state = again.status()
        return state if state.terminal else None

    state = wait_for(verdict, 15, f"run {run.id} to be terminal after its controller was killed")
    assert state is RunState.FAILED
    failure = again.failure
    assert failure is not None and "supervisor" in failure.reason, failure
    left = settle(lambda: under_test.processes(run.id), max(1.0, killed + 15 - time.monotonic()))
    assert not left, (f"run {run.id} is {state.value} ({failure.reason}) but its processes {left} still run "
                      f"{time.monotonic() - killed:.0f} s after the controller was killed")


DRIVER = '''
import json, os, signal, sys, time
from nbtrain.bundle import capture_cell
from nbtrain.client import submit_bundle
from nbtrain.spec import JobSpec
spec = JobSpec.from_dict(json.loads(sys.argv[1]))
run = submit_bundle(capture_cell(sys.argv[2], {"__name__": "__main__"}), spec)
print(run.id, flush=True)
deadline = time.monotonic() + 90
while time.monotonic() < deadline and sys.argv[3] not in run.logs(0).splitlines():
    time.sleep(0.1)
os.kill(os.getpid(), signal.SIGKILL)  # the kernel dies mid-run
'''
N = 40
SLOW_LINES_CELL = f'''import time
for i in range({N}):
    print(f"line {{i}}", flush=True)
    time.sleep(0.1)
"done"
'''


def test_attach_after_the_kernel_died_delivers_every_line_exactly_once(under_test: BackendUnderTest) -> None:
    spec = under_test.spec(name="reattach", procs_per_node=2)
    driver = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(spec.to_dict()), SLOW_LINES_CELL, "line 10"],
                            capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert driver.returncode == -9, driver.stderr[-3000:]
    run_id = driver.stdout.split()[0]

    again = under_test.attach(run_id)
    lines = LineCollector(lambda: again.sync(with_lines=True))
    deadline = time.monotonic() + 60
    while True:
        state = again.status()
        got = lines.read()
        if state.terminal and not got:
            break
        assert time.monotonic() < deadline, f"run {run_id} still {state.value} 60 s after attach"
        if not got:
            time.sleep(0.1)
    assert state is RunState.SUCCEEDED
    for rank in (0, 1):
        seen = lines.texts(rank, "line ")
        numbers = sorted(int(text.split()[1]) for text in seen)
        assert numbers == list(range(N)), (
            f"rank {rank}: missing {sorted(set(range(N)) - set(numbers))}, "
            f"twice {sorted({n for n in numbers if numbers.count(n) > 1})}")
    assert again.result(timeout=10) == "done"
