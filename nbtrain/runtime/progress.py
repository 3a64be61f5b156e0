"""Progress of this rank, as opposed to its liveness (stdlib only; torch is imported only if already in use).

A rank makes *progress* when it reports a step or a metric, or completes a collective. The hooks count the
collectives it issues (``torch.distributed.all_reduce``, ``barrier``, ..., and DDP's own, which its C++
reducer runs without them: the pre-forward sync and the gradient all-reduce in ``backward``) and remember the
one it is inside, so the heartbeat can say "rank 0 waits in all_reduce #6 and has made no progress for 40 s" even
though its heartbeat thread is alive. When its own progress stalls longer than ``NBTRAIN_STALL_S``, the
rank dumps the Python stack of every thread into its log once per stall (faulthandler: no ptrace needed).
"""

from __future__ import annotations

import faulthandler
import functools
import os
import signal
import sys
import threading
import time
from typing import Any

from nbtrain.runtime.watchdog import ENV_SUPERVISOR

__all__ = ["COLLECTIVES", "ENV_STALL_S", "STACKS_HEADER", "STACKS_SIGNAL_NAME", "advance", "dump_on_signal", "report",
           "self_check", "start", "wrap_collectives"]

ENV_STALL_S = "NBTRAIN_STALL_S"
STACKS_HEADER = "[nbtrain] stacks of every thread of rank"  # the triage finds dumps by this line
# Not used by torch, its elastic agent (unless told to forward it) or Accelerate; Slurm jobs often use SIGUSR1.
STACKS_SIGNAL_NAME = "SIGUSR2"
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all",
               "all_to_all_single", "barrier", "broadcast", "broadcast_object_list", "gather", "gather_object",
               "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter", "scatter_object_list")

_lock = threading.Lock()
_last = time.monotonic()
_issued = 0
_inside: str | None = None
_dumped = False
_failed_in: str | None = None  # the collective an exception came out of
_progressed = False  # any progress since the bundle started
_listening = False  # dump_on_signal registered: a local supervisor asks for the stacks


def advance() -> None:
    """Note progress now (a step, a metric, a finished collective)."""
    global _last, _dumped, _progressed
    with _lock:
        _last = time.monotonic()
        _dumped = False
        _progressed = True


def start() -> None:
    """The bundle starts now: the idle clock starts here (imports and start-up before it are not a stall)."""
    global _last
    with _lock:
        _last = time.monotonic()


def report() -> dict[str, Any]:
    """What the heartbeat sends: collectives issued, the one this rank is inside, seconds without progress."""
    with _lock:
        return {"collectives": _issued, "in_collective": _inside, "failed_in": _failed_in,
                "progressed": _progressed, "idle_s": round(time.monotonic() - _last, 3)}


def _wrap(name: str, original: Any, *, when: Any = None, counted: bool = True) -> Any:
    """``original`` counted as a collective called ``name`` (only while ``when()`` is true, if given).

    ``counted=False`` (DDP's forward and backward): only *where* the rank is is noted, not a collective issued nor
    one an error came out of; a backward that is not DDP's (a second model), or an OOM in it, is no desync.
    """
    @functools.wraps(original)
    def collective(*args: Any, **kwargs: Any) -> Any:
        global _issued, _inside
        if when is not None and not when():
            return original(*args, **kwargs)
        with _lock:
            _issued += int(counted)
            outer, _inside = _inside, name  # a collective inside another (FSDP's inside backward) restores it
        try:
            return original(*args, **kwargs)
        except BaseException:
            global _failed_in
            if counted:
                with _lock:
                    _failed_in = name
            raise
        finally:
            with _lock:
                _inside = outer
            advance()

    collective._nbtrain = True  # type: ignore[attr-defined]
    return collective


# DDP's reducer runs its collectives in C++ (the Python functions above never see them), measured: a rank whose
# peer sleeps before backward blocks inside ``backward()`` in the gradient all-reduce, and on the second forward
# inside ``_pre_forward`` (bucket rebuild, buffer broadcast). Both are named as collectives once a DDP model ran.
DDP_FORWARD = "DDP's pre-forward sync (bucket rebuild, buffer broadcast)"
DDP_BACKWARD = "DDP's gradient all_reduce (in backward)"
_ddp_seen = False


def _ddp_in_use() -> bool:
    return _ddp_seen


def _wrap_ddp(original: Any) -> Any:
    counted = _wrap(DDP_FORWARD, original, counted=False)

    @functools.wraps(original)
    def pre_forward(*args: Any, **kwargs: Any) -> Any:
        global _ddp_seen
        _ddp_seen = True
        return counted(*args, **kwargs)

    pre_forward._nbtrain = True  # type: ignore[attr-defined]
    return pre_forward


def wrap_collectives() -> None:
    """Count the collectives of ``torch.distributed`` and DDP's (safe to call twice; nothing without torch)."""
    try:
        import torch.autograd
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
    except ImportError:
        return
    for name in COLLECTIVES:
        original = getattr(dist, name, None)
        if original is not None and not getattr(original, "_nbtrain", False):
            setattr(dist, name, _wrap(name, original))
    pre_forward = getattr(DistributedDataParallel, "_pre_forward", None)
    if pre_forward is not None and not getattr(pre_forward, "_nbtrain", False):
        DistributedDataParallel._pre_forward = _wrap_ddp(pre_forward)  # type: ignore[method-assign]  # the hook
    if not getattr(torch.autograd.backward, "_nbtrain", False):
        torch.autograd.backward = _wrap(DDP_BACKWARD, torch.autograd.backward, when=_ddp_in_use, counted=False)


def dump_on_signal() -> int | None:
    """Dump every thread's stack to stderr (the rank's log) on :data:`STACKS_SIGNAL`; returns its number.

    faulthandler's handler is C: it writes the stacks even while the main thread holds the GIL in a C call (where
    the heartbeat thread, and :func:`self_check`, cannot run). The supervisor sends the signal to stalled ranks
    after writing :data:`STACKS_HEADER` into their logs. None where the platform has no such signal.
    """
    global _listening
    number = getattr(signal, STACKS_SIGNAL_NAME, None)
    if number is None:
        return None
    faulthandler.register(number, file=sys.stderr, all_threads=True, chain=False)
    _listening = True
    return int(number)


def self_check(rank: int, stall_s: float) -> None:
    """Called by the heartbeat: dump every thread's stack into this rank's log once per stall.

    Skipped under a local supervisor (``NBTRAIN_SUPERVISOR`` set): it signals the stalled ranks itself
    (:func:`dump_on_signal`), which also works when this thread cannot run, and two dumps would interleave.
    """
    global _dumped
    if _listening and os.environ.get(ENV_SUPERVISOR):
        return
    with _lock:
        idle = time.monotonic() - _last
        if stall_s <= 0 or idle < stall_s or _dumped:
            return
        _dumped = True
        inside = _inside
    where = f"waiting in {inside}" if inside else "outside any collective"
    sys.stderr.write(f"{STACKS_HEADER} {rank} ({where}, no progress for {idle:.0f} s):\n")
    sys.stderr.flush()
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
