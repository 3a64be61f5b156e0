"""Make a forked warm rank findable by its run id, as an exec'd rank is (stdlib only; Linux ``/proc``).

nbtrain finds every process of a run by ``NBTRAIN_RUN_ID=<id>`` in ``/proc/PID/environ``
(:mod:`nbtrain.backends.local.procs`: cancel, and the clean-up after a supervisor died). That file shows the
environment a process was exec'd with, which a forked rank shares with its agent: setting ``os.environ`` does
not change it. So each agent is started with a blank slot variable (:func:`slot_env`), and a rank, right after
the fork, writes ``NBTRAIN_RUN_ID=<id>`` over that slot in its own copy of the memory ``/proc/PID/environ``
reads (:func:`mark`; ``setproctitle`` rewrites the command line the same way). What the rank forks inherits the
mark; what it execs gets ``os.environ``, which carries the run id anyway.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["SLOT", "SLOT_BYTES", "mark", "slot_env"]

SLOT = "NBTRAIN_WARM_SLOT"
SLOT_BYTES = 160  # room for NBTRAIN_RUN_ID=<id>: run ids are at most 47 characters
_ENV_START = 47  # env_start of /proc/PID/stat (field 50), counted after "comm)"


def slot_env() -> dict[str, str]:
    """The variable to start an agent with: the blank its ranks write their mark over."""
    return {SLOT: "." * SLOT_BYTES}


def mark(name: str, value: str) -> bool:
    """Write ``name=value`` over this process's slot, in the environment ``/proc/self/environ`` shows.

    True when it is there now; False when this process has no slot (not started by :func:`slot_env`, or it was
    already used), the text does not fit, or the kernel refuses (then the run's supervisor ends the rank).
    """
    entry = f"{name}={value}".encode() + b"\0"
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[-1].split()
        start = int(fields[_ENV_START])
        environ = b"\0" + Path("/proc/self/environ").read_bytes()
        at = environ.find(b"\0" + SLOT.encode() + b"=")
        if at < 0:
            return False
        end = environ.index(b"\0", at + 1)  # the slot and its NUL are overwritten: nothing after them moves
        if len(entry) > end - at:
            return False
        with open("/proc/self/mem", "r+b", buffering=0) as memory:
            memory.seek(start + at)  # the slot's offset in environ (the prepended NUL makes up for the 0 base)
            memory.write(entry.ljust(end - at, b"\0"))
        return b"\0" + entry in b"\0" + Path("/proc/self/environ").read_bytes()
    except (OSError, ValueError, IndexError):
        return False
