"""``python -m nbtrain.client.agent RUN_ID [--store ROOT] [--experiment NAME] [--settle-s S]``: the run's MLflow
tracking agent (:mod:`nbtrain.tracking.agent`), with the run opened here.

The layering holds: tracking reads a run through :class:`nbtrain.reader.FollowedRun` and never builds one; the
client builds the :class:`~nbtrain.client.Run` and hands it over. :func:`nbtrain.tracking.starter.ensure_agent`
starts this module, detached.
"""

from __future__ import annotations

import sys

from nbtrain.client.run import Run
from nbtrain.reader import FollowedRun
from nbtrain.store import RunRecord, Store
from nbtrain.tracking.agent import main as agent_main

__all__ = ["main", "open_followed"]


def open_followed(record: RunRecord, store: Store) -> FollowedRun:
    """The run of ``record`` as the agent follows it: a handle on the store and the run's backend."""
    return Run(record, store)


def main(argv: list[str] | None = None) -> int:
    """The agent's process; its exit code says whether the MLflow run is complete."""
    return agent_main(argv, open_run=open_followed)


if __name__ == "__main__":
    sys.exit(main())
