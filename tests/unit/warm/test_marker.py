"""A forked warm rank is found by its run id in /proc, as an exec'd rank is (nbtrain/warm/marker.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from nbtrain.backends.local import procs
from nbtrain.warm import marker

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="/proc")

# Started with the slot like an agent; forks a child that marks itself (like a rank) and one grandchild of it
# (like a DataLoader worker), prints their pids, and sleeps until killed.
CHILD = textwrap.dedent("""
    import os, sys, time
    from nbtrain.warm import marker

    def hold(what):
        os.write(1, f"{os.getpid()} {what}\\n".encode())  # one write: the three processes share the pipe
        time.sleep(60)
        os._exit(0)

    if os.fork() == 0:  # the rank
        what = "marked" if marker.mark("NBTRAIN_RUN_ID", sys.argv[1]) else "refused"
        if os.fork() == 0:  # what the rank forks
            hold(what)
        hold(what)
    hold("agent")
""")


def _start(run_id: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], list[tuple[int, str]]]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, run_id], env=env, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout is not None
    try:
        lines = [proc.stdout.readline().split() for _ in range(3)]
        return proc, sorted((int(pid), what) for pid, what in lines)
    except BaseException:
        os.killpg(proc.pid, 9)
        raise


def test_a_forked_process_marked_with_a_run_id_is_found_by_it_and_so_is_what_it_forks() -> None:
    run_id = f"warm-marker-test-{os.urandom(3).hex()}"
    proc, seen = _start(run_id, {**os.environ, **marker.slot_env()})
    try:
        marked = {pid for pid, what in seen if what == "marked"}
        assert len(marked) == 2, seen  # the marked child and its own child
        assert set(procs.gang_pids(run_id)) == marked  # the unmarked parent (the agent) is not part of the run
        assert procs.terminate_gang(run_id, grace_s=2.0) == 0 and not procs.gang_pids(run_id)
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()


def test_without_a_slot_or_with_too_long_a_value_nothing_is_written() -> None:
    env = {k: v for k, v in os.environ.items() if k != marker.SLOT}
    run_id = f"warm-marker-none-{os.urandom(3).hex()}"
    proc, seen = _start(run_id, env)
    try:
        assert [what for _, what in seen].count("refused") == 2, seen
        assert not procs.gang_pids(run_id)
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
    assert not marker.mark("NBTRAIN_RUN_ID", "x" * (marker.SLOT_BYTES + 40))
