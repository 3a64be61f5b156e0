"""MLflow tracking of nbtrain runs, forwarded from the notebook side.

This package is the only place in nbtrain that imports mlflow, and it does so lazily (inside functions),
so ``import nbtrain.tracking`` costs only the standard library. Usage (what the client wires)::

    forwarder = TrackingForwarder(run)      # cheap: nothing is imported or created yet
    run.subscribe(forwarder.on_batch)       # the run's watcher feeds it; MLflow I/O runs on its own thread
    ...
    forwarder.close()                       # flush what is buffered when the handle is dropped

    run.tracking_url()                      # "Open in MLflow" link (None for a local sqlite/file store),
                                            # from tracking_url(record, store=store) here

See docs/tracking.md for what is recorded and the exactly-once rules.
"""

from __future__ import annotations

from nbtrain.tracking.forwarder import TrackingForwarder
from nbtrain.tracking.links import tracking_url

__all__ = ["TrackingForwarder", "tracking_url"]
