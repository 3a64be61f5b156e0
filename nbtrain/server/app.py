"""The ``nbtrain`` jupyter_server extension: registers the REST handlers over one run cache and one event feed."""

from __future__ import annotations

from typing import Any

from jupyter_server.extension.application import ExtensionApp
from traitlets import Int, Unicode

from nbtrain.server.feed import DEFAULT_MAX_CLIENTS, SummaryFeed
from nbtrain.server.handlers import handlers
from nbtrain.server.runs import DEFAULT_CAPACITY, RunCache
from nbtrain.store import Store

__all__ = ["NbtrainExtension"]


class NbtrainExtension(ExtensionApp):
    """REST API for nbtrain runs under ``/nbtrain/`` (authorisation resource ``nbtrain``)."""

    name = "nbtrain"
    store_root = Unicode("", config=True, help="The run store (default: $NBTRAIN_HOME or ~/.nbtrain).")
    run_cache_size = Int(DEFAULT_CAPACITY, config=True,
                         help="Run handles the server keeps in memory (least recently used are dropped).")
    max_event_streams = Int(DEFAULT_MAX_CLIENTS, config=True,
                            help="Concurrent /nbtrain/events streams; more get 503 with Retry-After.")

    def initialize_settings(self) -> None:
        runs = RunCache(Store(self.store_root or None), capacity=max(1, self.run_cache_size))
        feed = SummaryFeed(lambda: runs.listing().rows, max_clients=max(0, self.max_event_streams))
        self.settings.update({"nbtrain_runs": runs, "nbtrain_feed": feed})

    def initialize_handlers(self) -> None:
        self.handlers.extend(handlers())

    def _jupyter_server_extension_points(self) -> list[dict[str, Any]]:  # pragma: no cover - discovery hook
        return [{"module": "nbtrain.server.app", "app": NbtrainExtension}]
