"""Recording a run's verdict in its record: the one write a reading handle makes (besides the MLflow run id).

Several processes may hold a handle on the same run (the kernel that launched it, the server, the CLI, the
tracking agent): each saves the verdict it saw without undoing what another saved since it loaded the record.
"""

from __future__ import annotations

from nbtrain.store import RunRecord, Store

__all__ = ["save_verdict"]


def save_verdict(store: Store, record: RunRecord) -> None:
    """Save ``record`` (which carries this handle's verdict) unless the record on disk has a newer attempt (a
    resume elsewhere: then this verdict is stale and the file is left alone); keep the MLflow run id another
    process (the tracking agent) saved since ``record`` was loaded, and the reason a canceller gave."""
    try:
        on_disk = store.load(record.run_id)
    except Exception:  # noqa: BLE001 - unreadable or gone: this handle's copy is what there is
        on_disk = None
    if on_disk is not None:
        if on_disk.latest_attempt > record.latest_attempt:
            return
        record.tracking_run_id = record.tracking_run_id or on_disk.tracking_run_id
        record.cancel_reason = record.cancel_reason or on_disk.cancel_reason
    store.save(record)
