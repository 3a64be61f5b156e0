"""The ``nbtrain`` jupyter_server extension: registers the REST handlers over one run cache."""

from __future__ import annotations

from typing import Any

from jupyter_server.extension.application import ExtensionApp
from traitlets import Unicode

from nbtrain.server.handlers import handlers
from nbtrain.server.runs import RunCache
from nbtrain.store import Store

__all__ = ["NbtrainExtension"]


class NbtrainExtension(ExtensionApp):
    """REST API for nbtrain runs under ``/nbtrain/``."""

    name = "nbtrain"
    store_root = Unicode("", config=True, help="The run store (default: $NBTRAIN_HOME or ~/.nbtrain).")

    def initialize_settings(self) -> None:
        store = Store(self.store_root or None)
        self.settings.update({"nbtrain_runs": RunCache(store)})

    def initialize_handlers(self) -> None:
        self.handlers.extend(handlers())

    def _jupyter_server_extension_points(self) -> list[dict[str, Any]]:  # pragma: no cover - discovery hook
        return [{"module": "nbtrain.server.app", "app": NbtrainExtension}]
