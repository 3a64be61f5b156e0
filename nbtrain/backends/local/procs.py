"""Where the local backend's gang processes were found before :mod:`nbtrain.gang.procs` owned them (re-export)."""

from __future__ import annotations

from nbtrain.gang.procs import MARKER, gang_pids, pid_gone, pids_with_env, terminate_gang

__all__ = ["MARKER", "gang_pids", "pid_gone", "pids_with_env", "terminate_gang"]
