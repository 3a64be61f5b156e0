"""``GET /nbtrain/stats``: the adoption figures of the server's run store (what ``nbtrain stats --json`` prints).

``?since=30d`` (default 30d; ``all`` for every run) picks the window; ``?format=prometheus`` answers the
Prometheus text exposition format instead of JSON. With ``$MLFLOW_TRACKING_URI`` set in the server's environment,
the runs MLflow has that the store no longer has are counted too (as ``nbtrain stats`` does). Authorised as reading runs (action ``read`` on resource
``nbtrain``): whoever may list the runs may read figures computed from them, and no one else.
"""

from __future__ import annotations

import time

import tornado.web
from jupyter_server.auth.decorator import authorized

from nbtrain.server.base import BadRequest, BaseHandler

__all__ = ["StatsHandler"]


class StatsHandler(BaseHandler):
    """The JSON document of :func:`nbtrain.stats.render.to_json` (key by key in docs/stats.md)."""

    @tornado.web.authenticated
    @authorized("read")
    async def get(self) -> None:
        from nbtrain.stats import parse_since
        from nbtrain.stats.collect import configured_tracking_uri, gather
        from nbtrain.stats.prometheus import CONTENT_TYPE, to_prometheus
        from nbtrain.stats.render import to_json

        try:
            output = self.get_query_argument("format", "json")
            if output not in ("json", "prometheus"):
                raise BadRequest(f"?format={output[:40]!r}: expected 'json' or 'prometheus'.")
            try:
                window = parse_since(self.get_query_argument("since", "30d"))
            except ValueError as error:
                raise BadRequest(str(error).replace("--since", "?since", 1)) from None
            uri = configured_tracking_uri()  # the server's $MLFLOW_TRACKING_URI, as for nbtrain stats
            stats, sources = await self.run_blocking(
                lambda: gather([self.cache.store], time.time(), window, tracking_uri=uri))
        except Exception as error:  # noqa: BLE001 - becomes a JSON error
            return self.write_error_json(error)
        if output == "prometheus":
            self.finish(to_prometheus(stats, sources), set_content_type=CONTENT_TYPE)  # APIHandler's way
        else:
            self.write_json(to_json(stats, sources))
