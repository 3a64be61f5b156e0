"""The detached supervisor of one local attempt: ``python -m nbtrain.backends.local.supervisor ATTEMPT_DIR``.

Started in its own session so it outlives the kernel. The gang engine (:mod:`nbtrain.gang.engine`) supervises the
attempt; :class:`LocalGang` is its driver for a gang of local processes: one ``accelerate launch`` per node, each
in its own session and process group, its output in ``logs/node-N.log``, ended with its whole process tree
(the ``NBTRAIN_RUN_ID`` marker, :mod:`nbtrain.gang.procs`). The verdict rules, the stall watch, the triage and
``status.json`` are the engine's. This is the worked example of docs/backends.md.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

from nbtrain.gang import procs
from nbtrain.gang.driver import RULES, DriverDefaults
from nbtrain.gang.engine import Engine, supervise
from nbtrain.gang.facts import LAST_LINES
from nbtrain.gang.files import write_attempt_files
from nbtrain.gang.request import GangRequest
from nbtrain.runtime import watchdog

__all__ = ["LAST_LINES", "RULES", "LocalGang", "main", "next_attempt", "plan_next"]


def _die_with_parent() -> None:
    """In a launcher, before exec: SIGTERM it when the supervisor dies (Linux PR_SET_PDEATHSIG)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the ranks' own supervisor watchdog still ends the gang


class LocalGang(DriverDefaults):
    """One ``accelerate launch`` process per node on this machine (see the module docstring)."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.launchers: list[subprocess.Popen[bytes]] = []
        self.log_files: list[IO[bytes]] = []

    def start(self, tmp: Path) -> None:
        """Start every node's launcher with the plan's argv, environment and directory."""
        engine = self.engine
        for launcher in engine.plan.launchers:
            env = dict(os.environ)
            env.update(launcher.env)
            env["TMPDIR"] = str(tmp)  # torchelastic leaves /tmp/torchelastic_* behind; keep them here
            env.pop("NBTRAIN_SUPERVISOR_OF", None)
            env[watchdog.ENV_SUPERVISOR] = engine.identity  # ranks end themselves if this supervisor dies
            log = open(engine.logs_dir / f"node-{launcher.node}.log", "ab")
            self.log_files.append(log)
            self.launchers.append(
                subprocess.Popen(
                    launcher.argv, env=env, cwd=launcher.cwd, stdin=subprocess.DEVNULL,
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent,
                )
            )

    def nodes(self) -> list[tuple[int, int | None]]:
        """Each launcher's pid and exit code."""
        return [(proc.pid, proc.poll()) for proc in self.launchers]

    def end(self) -> int:
        """End every launcher's process group and every process carrying the run's marker."""
        groups = tuple(p.pid for p in self.launchers if p.poll() is None)
        killed = procs.terminate_gang(self.engine.run_id, grace_s=3.0, groups=groups)
        for proc in self.launchers:
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                proc.kill()
        return killed

    def close(self) -> None:
        """Close the launchers' log files."""
        for handle in self.log_files:
            handle.close()


def plan_next(previous: GangRequest) -> GangRequest:
    """The request of the next attempt of the same run (same spec, bundle and checkpoint root); writes nothing."""
    from nbtrain.backends.local.backend import LocalBackend  # restart-time only: the planning side is heavy
    from nbtrain.store import Store

    store = Store(previous.store_root)
    record = store.load(previous.run_id)
    new = LocalBackend(store).plan_restart(record.spec, previous.bundle_dir, previous.bundle_digest, previous.run_id,
                                           attempt=previous.attempt + 1, restart_budget=previous.restart_budget,
                                           previous=previous)
    return new.request


def next_attempt(previous: GangRequest) -> Path:
    """Plan and write the next attempt of the same run (:func:`plan_next`); its directory."""
    return write_attempt_files(plan_next(previous))


def main() -> None:
    """Process entry point: ``python -m nbtrain.backends.local.supervisor ATTEMPT_DIR``."""
    if len(sys.argv) != 2:
        sys.stderr.write("usage: python -m nbtrain.backends.local.supervisor ATTEMPT_DIR\n")
        sys.exit(2)
    supervise(Path(sys.argv[1]), LocalGang, next_attempt)


if __name__ == "__main__":
    main()
