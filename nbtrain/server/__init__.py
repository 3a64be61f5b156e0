"""jupyter_server extension: REST (and server-sent events) over the run store and client.

Thin by design: it uses the same Store and Run handles as the kernel side; there is no second
orchestration path. Loaded by ``jupyter server``/``jupyter lab`` through ``_jupyter_server_extension_points``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["_jupyter_server_extension_points"]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from nbtrain.server.app import NbtrainExtension

    return [{"module": "nbtrain.server.app", "app": NbtrainExtension}]
