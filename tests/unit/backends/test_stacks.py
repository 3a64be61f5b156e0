"""Stack dumps on request (nbtrain/backends/local/stacks.py): a real process stuck in C holding the GIL."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from nbtrain.backends.local import stacks

# A rank after worker start-up: faulthandler on the signal, then a self-deadlock in C that holds the GIL.
STUCK = """
import ctypes, sys
from nbtrain.runtime import progress
progress.dump_on_signal()
print("ready", flush=True)
libc, mutex = ctypes.PyDLL(None), ctypes.create_string_buffer(64)
def deadlock():
    libc.pthread_mutex_lock(mutex)
    libc.pthread_mutex_lock(mutex)
deadlock()
"""


def test_a_process_holding_the_gil_in_c_writes_its_stack_below_the_supervisors_header(tmp_path: Path) -> None:
    log = tmp_path / "rank-1.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-c", STUCK], stdout=subprocess.PIPE, stderr=out)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(0.3)  # inside the deadlock
        who = stacks.listener({"pid": proc.pid, "stacks_signal": int(signal.SIGUSR2), "host": socket.gethostname()})
        assert who is not None
        assert stacks.request_stacks(log, 1, who, "outside any collective, stalled")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "in deadlock" not in log.read_text():
            time.sleep(0.05)
        dumps = stacks.collect(tmp_path, [1, 2])
        assert list(dumps) == [1]  # rank 2 has no log: nothing for it
        assert "asked by the supervisor" in dumps[1] and "in deadlock" in dumps[1] and "<string>" in dumps[1]
        assert stacks.render(dumps).startswith("rank 1:\n")
    finally:
        proc.kill()
        proc.wait()


def test_only_ranks_on_this_host_that_listen_are_signalled(tmp_path: Path) -> None:
    here = socket.gethostname()
    assert stacks.listener({"pid": os.getpid(), "stacks_signal": 12, "host": "elsewhere"}) is None
    assert stacks.listener({"pid": os.getpid(), "host": here}) is None  # an older runtime: no handler registered
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    who = stacks.listener({"pid": gone.pid, "stacks_signal": 12, "host": here})
    assert who is not None and not stacks.request_stacks(tmp_path / "rank-0.log", 0, who, "stalled")
    assert not (tmp_path / "rank-0.log").exists()


def test_a_reused_pid_is_not_signalled(tmp_path: Path) -> None:
    """The rank said pid:start-time; a live process with that PID but another start time is someone else."""
    here = socket.gethostname()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        reused = stacks.listener({"pid": other.pid, "stacks_signal": int(signal.SIGUSR2), "host": here,
                                  "process": f"{other.pid}:1"})  # the rank that had this PID started at tick 1
        assert reused is not None and reused.process == f"{other.pid}:1"
        assert not stacks.request_stacks(tmp_path / "rank-0.log", 0, reused, "stalled")
        assert other.poll() is None, "SIGUSR2's default action would have ended the unrelated process"
        assert not (tmp_path / "rank-0.log").exists()
        foreign = stacks.listener({"pid": other.pid, "stacks_signal": 12, "host": here, "process": "1:5"})
        assert foreign is not None and foreign.process is None  # another PID's identity is ignored, not trusted
    finally:
        other.kill()
        other.wait()


def test_frames_in_the_cell_read_as_a_failure_traceback_does(tmp_path: Path) -> None:
    """faulthandler prints `File "…/main.py", line N in <module>`: the cell's line and its text are added."""
    from nbtrain.bundle import capture_cell

    cell = "import time\nx = 1\ntime.sleep(300)  # stuck here\nx = 2\n"
    bundle = capture_cell(cell, {"__name__": "__main__"}, cell_line_offset=1)
    directory = bundle.write(tmp_path / "bundles")
    main = directory / "main.py"
    main_line = bundle.manifest["cell"]["main_line"]
    here = Path(__file__).resolve()
    dump = "\n".join([
        "[nbtrain] stacks of every thread of rank 1 (outside any collective, stalled; asked by the supervisor):",
        "Current thread 0x00007f (most recent call first):",
        f'  File "{main}", line {main_line + 2} in <module>',
        f'  File "{main}", line 1 in <module>',  # nbtrain's own part of main.py: source, no cell line
        f'  File "{here}", line 1 in <module>',  # another readable file: its source line
        '  File "/nowhere/gone.py", line 7 in f',  # unreadable: as it was
    ])
    lines = stacks.annotate(dump).splitlines()
    assert lines[:2] == dump.splitlines()[:2]
    assert lines[2:4] == [f'  File "{main}", line {main_line + 2} in <module>  [cell line 4]',
                          "      time.sleep(300)  # stuck here"]
    own = lines.index(f'  File "{main}", line 1 in <module>')  # nbtrain's part of main.py: no cell line
    assert lines[own + 1] == "      " + main.read_text().splitlines()[0].strip()
    other = lines.index(f'  File "{here}", line 1 in <module>')
    assert lines[other + 1].startswith('      """Stack dumps on request')
    assert lines[-1] == '  File "/nowhere/gone.py", line 7 in f'
