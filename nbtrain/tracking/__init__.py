"""MLflow tracking of nbtrain runs, forwarded beside the run by a per-run tracking agent.

This package is the only place in nbtrain that imports mlflow, and it does so lazily (inside functions),
so ``import nbtrain.tracking`` costs only the standard library. The kernel never forwards: the launch path
and ``attach`` start the run's agent, a detached process that follows the run and forwards it::

    from nbtrain.tracking.starter import ensure_agent
    ensure_agent(store, record)             # start `python -m nbtrain.client.agent RUN_ID` unless one lives

    # in the agent (nbtrain/tracking/agent.py):
    forwarder = TrackingForwarder(run, tracking_uri=uri, experiment=name)
    run.subscribe(forwarder.on_batch, lines=False, watch=False)   # fed by the agent's own loop

    run.tracking_url()                      # "Open in MLflow" link (None for a local sqlite/file store),
                                            # from tracking_url(record, store=store) here

See docs/tracking.md for what is recorded and the exactly-once rules.
"""

from __future__ import annotations

from nbtrain.tracking.forwarder import TrackingForwarder
from nbtrain.tracking.links import tracking_url

__all__ = ["TrackingForwarder", "tracking_url"]
