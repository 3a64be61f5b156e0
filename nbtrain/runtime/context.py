"""The worker's view of its run: who it is and where its events go (stdlib only).

The backend passes everything through environment variables (the contract below), so the worker
needs no nbtrain configuration and the same runtime serves local processes and Kubernetes pods.

========================  ===================================================================
NBTRAIN_RUN_ID            the run id
NBTRAIN_ATTEMPT           attempt number (0 for the first launch, +1 per restart/resume)
NBTRAIN_EVENTS_DIR        directory for ``rank-<R>.jsonl`` event files, or
NBTRAIN_EVENT_STREAM      ``stdout``: events as marked lines in the rank's output (no shared disk)
NBTRAIN_EVENT_KEY         with ``stdout``: the attempt's event key (hex), which tags every event line
                          (HMAC-SHA256, see nbtrain.events); read once and removed from ``os.environ``
NBTRAIN_LOGS_DIR          directory for ``rank-<R>.log`` (stdout+stderr of rank R); optional
NBTRAIN_RESULT_PATH       where rank 0 writes its pickled result (unset: sent as a RESULT event)
NBTRAIN_NODE_RANK         this node's index (the launcher's machine rank)
NBTRAIN_COLLECTIVE_TIMEOUT  seconds before a hung collective fails (process-group timeout)
NBTRAIN_HEARTBEAT_S       seconds between heartbeats (default 5)
RANK / LOCAL_RANK / WORLD_SIZE   set by torchrun/accelerate
========================  ===================================================================

Events on stdout share the channel with whatever the training code prints, so only lines tagged with
the key count as events on the notebook side. Without a key (an exported job applied by hand, no
notebook following it) nothing is reported as events; one line on stderr says so.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbtrain.events import EventKind, EventWriter, StreamEventWriter, decode_event_key

ENV_RUN_ID = "NBTRAIN_RUN_ID"
ENV_ATTEMPT = "NBTRAIN_ATTEMPT"
ENV_EVENTS_DIR = "NBTRAIN_EVENTS_DIR"
ENV_EVENT_STREAM = "NBTRAIN_EVENT_STREAM"
ENV_EVENT_KEY = "NBTRAIN_EVENT_KEY"
ENV_LOGS_DIR = "NBTRAIN_LOGS_DIR"
ENV_RESULT_PATH = "NBTRAIN_RESULT_PATH"
ENV_NODE_RANK = "NBTRAIN_NODE_RANK"
ENV_COLLECTIVE_TIMEOUT = "NBTRAIN_COLLECTIVE_TIMEOUT"
ENV_HEARTBEAT_S = "NBTRAIN_HEARTBEAT_S"
#: "0" when the run is not tracked (--no-tracking): then a user's own Accelerate MLflow tracker is left alone
ENV_TRACKED = "NBTRAIN_TRACKED"


@dataclass
class WorkerContext:
    """Identity and event sink of this worker process. One per process (see :func:`current`)."""

    run_id: str
    attempt: int
    rank: int
    local_rank: int
    world_size: int
    node_rank: int
    events: EventWriter | StreamEventWriter
    result_path: Path | None
    last_step: int | None = None
    auto_step: int = 0

    def emit(self, kind: EventKind, **data: Any) -> None:
        """Write one event; never raises (telemetry must not kill training)."""
        try:
            self.events.emit(kind, **data)
        except OSError:
            pass


_lock = threading.Lock()
_current: WorkerContext | None = None


def current() -> WorkerContext | None:
    """This process's context, created from the environment on first use; None outside a run."""
    global _current
    with _lock:
        to_dir = os.environ.get(ENV_EVENTS_DIR)
        to_stream = os.environ.get(ENV_EVENT_STREAM) == "stdout"
        if _current is None and (to_dir or to_stream) and os.environ.get(ENV_RUN_ID):
            rank = int(os.environ.get("RANK", "0"))
            attempt = int(os.environ.get(ENV_ATTEMPT, "0"))
            writer: EventWriter | StreamEventWriter
            if to_dir:
                writer = EventWriter(Path(to_dir) / f"rank-{rank}.jsonl", f"rank-{rank}", attempt=attempt, rank=rank)
            else:
                # removed from the environment so that code and subprocesses of this rank do not pass it on by
                # accident (printing os.environ, a library logging its environment)
                key = decode_event_key(os.environ.pop(ENV_EVENT_KEY, None))
                if key is None:
                    sys.stderr.write(f"[nbtrain] rank {rank}: no {ENV_EVENT_KEY} (or not a valid key): events "
                                     "(metrics, errors, the result) are not reported on stdout\n")
                writer = StreamEventWriter(f"rank-{rank}", key=key, attempt=attempt, rank=rank)
            result = os.environ.get(ENV_RESULT_PATH)
            _current = WorkerContext(
                run_id=os.environ[ENV_RUN_ID],
                attempt=attempt,
                rank=rank,
                local_rank=int(os.environ.get("LOCAL_RANK", "0")),
                world_size=int(os.environ.get("WORLD_SIZE", "1")),
                node_rank=int(os.environ.get(ENV_NODE_RANK, os.environ.get("GROUP_RANK", "0"))),
                events=writer,
                result_path=Path(result) if result else None,
            )
        return _current
