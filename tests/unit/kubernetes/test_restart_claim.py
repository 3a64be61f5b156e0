"""The claim on an automatic restart (Kubernetes): one holder at a time, released when its holder goes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from nbtrain.backends.kubernetes.attempts import CLAIM_FILE, _claimed

HOLD = r"""
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(60)
"""


def test_a_claimant_that_dies_mid_restart_releases_the_claim(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / CLAIM_FILE)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with _claimed(tmp_path) as mine:
            assert not mine  # a kernel is submitting the restart: nobody else starts it
        holder.kill()  # the kernel dies before the new attempt's handle is written
        holder.wait(timeout=10)
        with _claimed(tmp_path) as mine:
            assert mine  # the next process to look takes it over: the run does not wait in "restarting" for ever
        assert (tmp_path / CLAIM_FILE).stat().st_mode & 0o777 == 0o600
    finally:
        holder.kill()
        holder.wait(timeout=10)


def test_a_cancel_waits_for_a_restart_being_submitted(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD.replace("time.sleep(60)", "time.sleep(1.0)"),
                               str(tmp_path / CLAIM_FILE)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with _claimed(tmp_path) as mine:
            assert not mine  # being submitted now
        with _claimed(tmp_path, wait=True) as mine:
            assert mine  # got it once the submit was done (then the new attempt is what gets cancelled)
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert os.path.exists(tmp_path / CLAIM_FILE)
