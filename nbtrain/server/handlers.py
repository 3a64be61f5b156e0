"""REST handlers under ``/nbtrain/``. Every handler requires an authenticated *and* authorised user.

GET  /nbtrain/runs                        list (filters: ?state=running&backend=local)           read
GET  /nbtrain/runs/<id>                   one run: summary, spec, attempts, checkpoints, failure  read
GET  /nbtrain/runs/<id>/logs/<rank>       a page of one rank's log (?offset=0&limit=500&attempt=N; offset<0 counts
                                          from the end; read by seeking, never the whole file: LogsHandler)  read
GET  /nbtrain/runs/<id>/search            the lines of the whole log (every rank, or ?ranks=0,3) that contain ?q=TEXT,
                                          paged (?limit=200; continue with the answer's next: ?rank=R&line=N)  read
GET  /nbtrain/runs/<id>/metrics           recent metrics (?rank=0&last=2000)                     read
POST /nbtrain/runs/<id>/cancel            end every process of the run                           execute
POST /nbtrain/runs/<id>/resume            relaunch from the latest checkpoint                    execute
POST /nbtrain/export                      {"path": "nb.ipynb", "out": "dir", "cell": N | "tag": T} -> job directory
                                                                                                 write
GET  /nbtrain/stats                       adoption figures (?since=30d&format=json|prometheus)     read
GET  /nbtrain/profiles                    the profiles --profile can name, broken ones as "unreadable"
                                          (?path=nb.ipynb: with the nbtrain.toml beside it)      read
GET  /nbtrain/events                      server-sent events: {"runs": [...]} whenever a run's summary changes
                                                                                                 read

Authorisation is jupyter_server's (``@authorized``, resource :data:`AUTH_RESOURCE` = ``"nbtrain"``), so a
deployment's Authorizer decides: a read-only collaborator lists and watches runs but cannot cancel, resume or
export (403). Run rows are ``nbtrain.model.RunSummary`` (nbtrain/schemas/run-summary.schema.json); the list
also names runs it could not read (``"unreadable": [{"id", "message"}]``) instead of failing. Every body is
strict JSON (a non-finite number is sent as null), errors included: ``{"error": kind, "message": text}`` with
400 for a bad request (the message names the field or parameter and what is expected), 403, 404, 409, 422,
503 (too many event streams, with Retry-After); an unexpected failure is a 500 whose details go to the server
log, not to the client.
"""

from __future__ import annotations

import inspect
import logging
import re
import time
from typing import Any

import tornado.iostream
import tornado.web
from jupyter_server.auth.decorator import authorized

from nbtrain.errors import RunNotFoundError
from nbtrain.model import LogPage
from nbtrain.server.base import AUTH_RESOURCE, BadRequest, BaseHandler, dumps
from nbtrain.server.exporting import export_request, run_export
from nbtrain.server.feed import SummaryFeed
from nbtrain.server.logsearch import search_logs
from nbtrain.server.profiles import ProfilesHandler
from nbtrain.server.runs import run_detail, run_summary
from nbtrain.server.stats import StatsHandler

__all__ = ["AUTH_RESOURCE", "handlers"]

log = logging.getLogger("nbtrain.server")

MAX_PAGE = 5000
MAX_LINE = 10**12  # a log line number or offset beyond any real log
MAX_RANK = 10**6
MAX_ATTEMPT = 10**6
STREAM_SECONDS = 3600  # one event stream lasts at most an hour (the panel reconnects)
KEEP_ALIVE_S = 5.0  # a comment line at least this often, even if the store is slow to list
RETRY_AFTER_S = 10
_RUN_ID = re.compile(r"^[a-z0-9][-a-z0-9]{0,199}$")


def _run_id(text: str) -> str:
    """``text`` if it can be a run id (or a prefix of one); else RunNotFoundError (404)."""
    if not _RUN_ID.match(text):
        raise RunNotFoundError(f"no run {text[:80]!r}: run ids are lower-case letters, digits and '-' "
                               "(list them with GET /nbtrain/runs).")
    return text


def _int_text(text: str | None, what: str, default: int, low: int, high: int) -> int:
    """``text`` as a whole number in ``low..high`` (``default`` when absent); BadRequest naming ``what``."""
    if text is None or text == "":
        return default
    try:
        value = int(text) if len(text) <= 20 else None
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise BadRequest(f"{what}={text[:40]!r}: expected a whole number from {low} to {high}.")
    return value


class _Run(BaseHandler):
    def int_arg(self, name: str, default: int, low: int, high: int) -> int:
        return _int_text(self.get_query_argument(name, None), f"?{name}", default, low, high)

    async def may_write(self) -> bool:
        """Whether this user may write (start runs) under the server's authorizer: who sees --env values."""
        allowed = self.authorizer.is_authorized(self, self.current_user, "write", AUTH_RESOURCE)
        if inspect.isawaitable(allowed):  # jupyter_server >= 2.? may answer asynchronously
            allowed = await allowed
        return bool(allowed)


class RunsHandler(_Run):
    @tornado.web.authenticated
    @authorized("read")
    async def get(self) -> None:
        try:
            state = self.get_query_argument("state", None)
            backend = self.get_query_argument("backend", None)
            listing = await self.run_blocking(self.cache.listing)
        except Exception as error:  # noqa: BLE001 - becomes a JSON error
            return self.write_error_json(error)
        rows = [r for r in listing.rows
                if (not state or r["state"] == state) and (not backend or r["backend"] == backend)]
        self.write_json({"runs": rows, "unreadable": listing.unreadable})


class RunHandler(_Run):
    @tornado.web.authenticated
    @authorized("read")
    async def get(self, run_id: str) -> None:
        try:
            run_id = _run_id(run_id)
            may_write = await self.may_write()
            self.write_json(await self.run_blocking(lambda: run_detail(self.cache.get(run_id), may_write=may_write)))
        except Exception as error:  # noqa: BLE001
            self.write_error_json(error)


class LogsHandler(_Run):
    """A page of one rank's log: ``{"run", "rank", "attempt", "offset", "total", "lines"}``.

    ``lines[i]`` is line ``offset + i`` (0-based). ``offset >= 0`` is a line number; ``offset < 0`` counts from
    the end (``-1000`` with ``limit=1000``: the last 1,000 lines). Only complete lines are served (a rank's
    line still being written appears once its newline is). ``total`` is the number of lines; for a read
    from the end of a large log nobody has paged by line number yet it is null and ``offset`` stays
    negative (counting would scan the file; see ``nbtrain.logpage.read_page``). ``attempt`` (default: the
    run's latest) picks the attempt's log. ``limit`` is clamped to 0..5000.
    """

    @tornado.web.authenticated
    @authorized("read")
    async def get(self, run_id: str, rank: str) -> None:
        try:
            run_id = _run_id(run_id)
            number = _int_text(rank, "rank", 0, 0, MAX_RANK)
            offset = self.int_arg("offset", 0, -MAX_LINE, MAX_LINE)
            limit = max(0, min(MAX_PAGE, self.int_arg("limit", 500, -MAX_LINE, MAX_LINE)))
            attempt_arg = self.get_query_argument("attempt", None)
            attempt = None if attempt_arg in (None, "") else self.int_arg("attempt", 0, 0, MAX_ATTEMPT)

            def page() -> dict[str, Any]:
                run = self.cache.get(run_id)
                chosen = run.snapshot().attempt if attempt is None else attempt
                if number < run.spec.world_size:
                    got = run.log_page(number, offset, limit, attempt=chosen)
                else:  # a rank the run does not have has an empty log (as the backends' pages say)
                    got = LogPage((), max(offset, 0), 0)
                return {"run": run.id, "rank": number, "attempt": chosen, "offset": got.start,
                        "total": got.total, "lines": list(got.lines)}

            self.write_json(await self.run_blocking(page))
        except Exception as error:  # noqa: BLE001
            self.write_error_json(error)


class SearchHandler(_Run):
    """Whole-log search: ``{"run", "attempt", "q", "ranks", "matches": [{"rank", "line", "text"}], "next", "scanned"}``.

    ``next`` is ``{"rank", "line"}`` to pass back as ``?rank=&line=`` for more, or null when every line was read
    (:func:`nbtrain.server.logsearch.search_logs`: at most ``limit`` (1..1000) matches and 200,000 lines read per
    call). ``ranks`` (``?ranks=0,3``; default every rank) and ``attempt`` (default the latest) as for logs.
    """

    @tornado.web.authenticated
    @authorized("read")
    async def get(self, run_id: str) -> None:
        try:
            run_id = _run_id(run_id)
            query = self.get_query_argument("q", "")
            if not query.strip() or len(query) > 1000:
                raise BadRequest(f"?q={query[:40]!r}: give the text to search for (1 to 1000 characters).")
            limit = self.int_arg("limit", 200, 1, 1000)
            attempt_arg = self.get_query_argument("attempt", None)
            attempt = None if attempt_arg in (None, "") else self.int_arg("attempt", 0, 0, MAX_ATTEMPT)
            ranks_arg = self.get_query_argument("ranks", "") or ""
            chosen = [_int_text(r.strip(), "?ranks", 0, 0, MAX_RANK) for r in ranks_arg.split(",") if r.strip()]
            cursor_rank = self.get_query_argument("rank", None)
            start = None if cursor_rank in (None, "") else (
                self.int_arg("rank", 0, 0, MAX_RANK), self.int_arg("line", 0, 0, MAX_LINE))

            def search() -> dict[str, Any]:
                run = self.cache.get(run_id)
                at = run.snapshot().attempt if attempt is None else attempt
                ranks = [r for r in chosen if r < run.spec.world_size] if chosen else list(range(run.spec.world_size))
                if start is not None and start[0] not in ranks:
                    raise BadRequest(f"?rank={start[0]}: the cursor's rank is not one of the searched ranks {ranks}.")
                found = search_logs(lambda r, first, n: run.log_page(r, first, n, attempt=at), ranks, query,
                                    start=start, limit=limit)
                return {"run": run.id, "attempt": at, "q": query, "ranks": ranks,
                        "matches": [{"rank": r, "line": n, "text": t} for r, n, t in found.matches],
                        "next": None if found.next is None else {"rank": found.next[0], "line": found.next[1]},
                        "scanned": found.scanned}

            self.write_json(await self.run_blocking(search))
        except Exception as error:  # noqa: BLE001
            self.write_error_json(error)


class MetricsHandler(_Run):
    @tornado.web.authenticated
    @authorized("read")
    async def get(self, run_id: str) -> None:
        try:
            run_id = _run_id(run_id)
            rank = self.int_arg("rank", 0, 0, MAX_RANK)
            last = max(1, self.int_arg("last", 2000, -MAX_LINE, MAX_LINE))

            def metrics() -> dict[str, Any]:
                run = self.cache.get(run_id)
                found = run.metrics(rank) if rank < run.spec.world_size else {}
                return {"run": run.id, "rank": rank, "metrics": {k: v[-last:] for k, v in found.items()}}

            self.write_json(await self.run_blocking(metrics))
        except Exception as error:  # noqa: BLE001
            self.write_error_json(error)


class CancelHandler(_Run):
    @tornado.web.authenticated
    @authorized("execute")
    async def post(self, run_id: str) -> None:
        try:
            run_id = _run_id(run_id)

            def cancel() -> dict[str, Any]:
                run = self.cache.get(run_id)
                run.cancel()
                return run_summary(run)

            self.write_json(await self.run_blocking(cancel))
        except Exception as error:  # noqa: BLE001
            self.write_error_json(error)


class ResumeHandler(_Run):
    @tornado.web.authenticated
    @authorized("execute")
    async def post(self, run_id: str) -> None:
        try:
            run_id = _run_id(run_id)

            def resume() -> dict[str, Any]:
                run = self.cache.get(run_id)
                run.resume()
                return run_summary(run)

            self.write_json(await self.run_blocking(resume))
        except Exception as error:  # noqa: BLE001
            self.write_error_json(error)


class ExportHandler(BaseHandler):
    """Export one cell of a notebook under the server root to a job directory under the server root.

    The body is ``{"path": str, "out": str?, "cell": int | str?, "tag": str?}`` (see
    :func:`nbtrain.server.exporting.export_request`); both paths are resolved (symbolic links followed) and must
    stay inside the server's root directory; ``out`` is relative. Answers 201 ``{"path", "files"}``.
    """

    @tornado.web.authenticated
    @authorized("write")
    async def post(self) -> None:
        try:
            request = export_request(self.request.body)
            root = self.settings.get("server_root_dir") or "."
            self.write_json(await self.run_blocking(lambda: run_export(root, request)), 201)
        except Exception as error:  # noqa: BLE001
            self.write_error_json(error)


class EventsHandler(BaseHandler):
    """Server-sent events: the changed run summaries, from the shared poller (:class:`SummaryFeed`).

    The first message lists every run; later ones the runs whose state, attempt, step or failure changed,
    else a keep-alive comment. A stream lasts at most an hour. Above the server's stream cap: 503 with
    Retry-After.
    """

    _joined = False

    @property
    def feed(self) -> SummaryFeed:
        feed: SummaryFeed = self.settings["nbtrain_feed"]
        return feed

    @tornado.web.authenticated
    @authorized("read")
    async def get(self) -> None:
        after = self.feed.join()
        if after is None:
            self.set_header("Retry-After", str(RETRY_AFTER_S))
            return self.write_json({"error": "TooManyStreams", "message": (
                f"this server already serves {self.feed.max_clients} run event streams; retry in {RETRY_AFTER_S} s "
                "(NbtrainExtension.max_event_streams raises the cap).")}, 503)
        self._joined = True
        try:
            await self._stream(after)
        finally:
            self._leave()

    async def _stream(self, after: int) -> None:
        self.set_header("Content-Type", "text/event-stream")
        self.set_header("Cache-Control", "no-cache")
        sent: dict[str, str] = {}  # run id -> signature of the row this client last sent
        first = True
        deadline = time.monotonic() + STREAM_SECONDS
        while time.monotonic() < deadline:
            tick = await self.feed.next(after, timeout=KEEP_ALIVE_S)
            fresh = tick.number > after
            changed: list[dict[str, Any]] = []
            if fresh:
                after = tick.number
                changed = [row for run_id, sig, row in tick.runs if sent.get(run_id) != sig]
                sent = {run_id: sig for run_id, sig, _ in tick.runs}
            if changed or (first and fresh):  # the first message lists every run, even none
                self.write(f"data: {dumps({'runs': changed})}\n\n")
                first = False
            else:
                self.write(": keep-alive\n\n")
            try:
                await self.flush()
            except tornado.iostream.StreamClosedError:
                return
        self.finish()

    def _leave(self) -> None:
        if self._joined:
            self._joined = False
            self.feed.leave()

    def on_connection_close(self) -> None:
        self._leave()  # the stream's next write fails and ends the loop; the slot is free at once


class NotFoundHandler(BaseHandler):
    """Any other path under ``/nbtrain/``: a JSON 404 (not the server's HTML page)."""

    def _not_found(self, *args: Any) -> None:
        self.write_error_json(RunNotFoundError(
            f"no nbtrain endpoint {self.request.method} {self.request.path[:200]!r}; see GET /nbtrain/runs."))

    @tornado.web.authenticated
    @authorized("read")
    async def get(self, *args: Any) -> None:
        self._not_found()

    post = put = delete = patch = get


def handlers() -> list[tuple[str, type]]:
    """The handler table, which reads as the REST map (jupyter_server adds its base_url in front).

    Path parts match anything but ``/`` and are checked in the handler, so a malformed id or rank is a JSON
    error (400/404) and never reaches the store as a path.
    """
    prefix = "/nbtrain"
    run = r"(?P<run_id>[^/]+)"
    return [
        (rf"{prefix}/runs", RunsHandler),
        (rf"{prefix}/runs/{run}", RunHandler),
        (rf"{prefix}/runs/{run}/logs/(?P<rank>[^/]+)", LogsHandler),
        (rf"{prefix}/runs/{run}/search", SearchHandler),
        (rf"{prefix}/runs/{run}/metrics", MetricsHandler),
        (rf"{prefix}/runs/{run}/cancel", CancelHandler),
        (rf"{prefix}/runs/{run}/resume", ResumeHandler),
        (rf"{prefix}/export", ExportHandler),
        (rf"{prefix}/events", EventsHandler),
        (rf"{prefix}/stats", StatsHandler),
        (rf"{prefix}/profiles", ProfilesHandler),
        (rf"{prefix}(?:/.*)?", NotFoundHandler),
    ]

