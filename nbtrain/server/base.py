"""What every nbtrain handler shares: the auth resource, strict JSON bodies and the one error-to-status map."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from jupyter_server.base.handlers import APIHandler

from nbtrain.errors import CaptureError, NbtrainError, RunNotFoundError, SpecError
from nbtrain.model import json_safe
from nbtrain.server.runs import RunCache

__all__ = ["AUTH_RESOURCE", "BadRequest", "BaseHandler", "NotFound", "dumps", "status_of"]

log = logging.getLogger("nbtrain.server")

#: The resource name nbtrain's handlers ask the server's Authorizer about (actions: read, write, execute).
AUTH_RESOURCE = "nbtrain"


class BadRequest(ValueError):
    """The request itself is wrong (a body field, a query parameter): 400, the message says what is expected."""


class NotFound(LookupError):
    """What the request names does not exist (a notebook to export): 404."""


def dumps(data: Any) -> str:
    """Strict JSON (no NaN/Infinity: such numbers become null); other objects as their str()."""
    return json.dumps(json_safe(data), default=str, allow_nan=False)


def status_of(error: BaseException) -> int:
    """The HTTP status of ``error``: 400 bad request or value, 404 unknown, 409 refused now, 422 cannot capture."""
    if isinstance(error, (RunNotFoundError, NotFound)):
        return 404
    if isinstance(error, (SpecError, ValueError)):
        return 400
    if isinstance(error, CaptureError):
        return 422
    if isinstance(error, NbtrainError):
        return 409
    return 500


class BaseHandler(APIHandler):
    """Base of nbtrain's handlers: JSON in and out, errors as ``{"error", "message"}``."""

    auth_resource = AUTH_RESOURCE

    @property
    def cache(self) -> RunCache:
        runs: RunCache = self.settings["nbtrain_runs"]
        return runs

    def write_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(dumps(data))

    def write_error_json(self, error: BaseException) -> None:
        """Answer ``error`` as JSON with :func:`status_of`; an unexpected error's details go to the log only."""
        status = status_of(error)
        if status == 500:
            log.error("nbtrain: %s %s failed", self.request.method, self.request.path, exc_info=error)
            message = f"the nbtrain server extension failed ({type(error).__name__}); the server's log has the details."
        else:
            message = str(error)
        self.write_json({"error": type(error).__name__, "message": message}, status)

    async def run_blocking(self, fn: Any, *args: Any) -> Any:
        """Run store/backend I/O off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)
