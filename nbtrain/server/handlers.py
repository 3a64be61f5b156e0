"""REST handlers under ``/nbtrain/``. Every handler requires an authenticated user.

GET  /nbtrain/runs                        list (filters: ?state=running&backend=local)
GET  /nbtrain/runs/<id>                   one run: summary, spec, attempts, checkpoints, failure
GET  /nbtrain/runs/<id>/logs/<rank>       a page of one rank's log (?offset=0&limit=500&attempt=N; offset<0 counts
                                          from the end; read by seeking, never the whole file: LogsHandler)
GET  /nbtrain/runs/<id>/metrics           recent metrics (?rank=0&last=2000)
POST /nbtrain/runs/<id>/cancel            end every process of the run
POST /nbtrain/runs/<id>/resume            relaunch from the latest checkpoint
POST /nbtrain/export                      {"path": "nb.ipynb", "out": "dir", "cell": N | "tag": T} -> job directory
GET  /nbtrain/events                      server-sent events: {"runs": [...]} whenever a run's summary changes

Run rows are ``nbtrain.model.RunSummary`` (nbtrain/schemas/run-summary.schema.json). Every body is strict
JSON: a non-finite number (a NaN metric, ``--timeout inf``) is sent as null.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import tornado.web
from jupyter_server.base.handlers import APIHandler

from nbtrain.errors import CaptureError, NbtrainError, RunNotFoundError, SpecError
from nbtrain.model import LogPage, json_safe
from nbtrain.server.runs import RunCache, run_detail, run_summary

__all__ = ["handlers"]

MAX_PAGE = 5000


def _dumps(data: Any) -> str:
    """Strict JSON (no NaN/Infinity: such numbers become null); other objects as their str()."""
    return json.dumps(json_safe(data), default=str, allow_nan=False)


class _Base(APIHandler):
    @property
    def cache(self) -> RunCache:
        runs: RunCache = self.settings["nbtrain_runs"]
        return runs

    def write_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(_dumps(data))

    def write_error_json(self, error: Exception) -> None:
        if isinstance(error, RunNotFoundError):
            status = 404
        elif isinstance(error, (SpecError, ValueError)):
            status = 400
        elif isinstance(error, CaptureError):
            status = 422
        elif isinstance(error, NbtrainError):
            status = 409
        else:
            status = 500
        self.write_json({"error": type(error).__name__, "message": str(error)}, status)

    async def run_blocking(self, fn: Any, *args: Any) -> Any:
        """Run store/backend I/O off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


class RunsHandler(_Base):
    @tornado.web.authenticated
    async def get(self) -> None:
        state, backend = self.get_query_argument("state", None), self.get_query_argument("backend", None)
        try:
            rows = await self.run_blocking(lambda: [run_summary(r) for r in self.cache.all()])
        except Exception as error:  # noqa: BLE001 - becomes a JSON error
            return self.write_error_json(error)
        rows = [r for r in rows if (not state or r["state"] == state) and (not backend or r["backend"] == backend)]
        self.write_json({"runs": rows})


class RunHandler(_Base):
    @tornado.web.authenticated
    async def get(self, run_id: str) -> None:
        try:
            self.write_json(await self.run_blocking(lambda: run_detail(self.cache.get(run_id))))
        except Exception as error:  # noqa: BLE001
            self.write_error_json(error)


class LogsHandler(_Base):
    """A page of one rank's log: ``{"run", "rank", "attempt", "offset", "total", "lines"}``.

    ``lines[i]`` is line ``offset + i`` (0-based). ``offset >= 0`` is a line number; ``offset < 0`` counts from
    the end (``-1000`` with ``limit=1000``: the last 1,000 lines). Only complete lines are served (a rank's
    line still being written appears once its newline is). ``total`` is the number of lines; for a read
    from the end of a large log nobody has paged by line number yet it is null and ``offset`` stays
    negative (counting would scan the file; see ``nbtrain.logpage.read_page``). ``attempt`` (default: the
    run's latest) picks the attempt's log. ``limit`` is clamped to 0..5000.
    """

    @tornado.web.authenticated
    async def get(self, run_id: str, rank: str) -> None:
        try:
            offset = int(self.get_query_argument("offset", "0"))
            limit = max(0, min(MAX_PAGE, int(self.get_query_argument("limit", "500"))))
            attempt_arg = self.get_query_argument("attempt", None)
            attempt = None if attempt_arg in (None, "") else int(attempt_arg)

            def page() -> dict[str, Any]:
                run = self.cache.get(run_id)
                chosen = run.snapshot().attempt if attempt is None else attempt
                number = int(rank)
                if number < run.spec.world_size:
                    got = run.log_page(number, offset, limit, attempt=chosen)
                else:  # a rank the run does not have has an empty log (as the backends' pages say)
                    got = LogPage((), max(offset, 0), 0)
                return {"run": run.id, "rank": number, "attempt": chosen, "offset": got.start,
                        "total": got.total, "lines": list(got.lines)}

            self.write_json(await self.run_blocking(page))
        except Exception as error:  # noqa: BLE001
            self.write_error_json(error)


class MetricsHandler(_Base):
    @tornado.web.authenticated
    async def get(self, run_id: str) -> None:
        try:
            rank = int(self.get_query_argument("rank", "0"))
            last = max(1, int(self.get_query_argument("last", "2000")))
            metrics = await self.run_blocking(lambda: self.cache.get(run_id).metrics(rank))
            self.write_json({"run": run_id, "rank": rank, "metrics": {k: v[-last:] for k, v in metrics.items()}})
        except Exception as error:  # noqa: BLE001
            self.write_error_json(error)


class CancelHandler(_Base):
    @tornado.web.authenticated
    async def post(self, run_id: str) -> None:
        try:
            def cancel() -> dict[str, Any]:
                run = self.cache.get(run_id)
                run.cancel()
                return run_summary(run)

            self.write_json(await self.run_blocking(cancel))
        except Exception as error:  # noqa: BLE001
            self.write_error_json(error)


class ResumeHandler(_Base):
    @tornado.web.authenticated
    async def post(self, run_id: str) -> None:
        try:
            def resume() -> dict[str, Any]:
                run = self.cache.get(run_id)
                run.resume()
                return run_summary(run)

            self.write_json(await self.run_blocking(resume))
        except Exception as error:  # noqa: BLE001
            self.write_error_json(error)


class ExportHandler(_Base):
    @tornado.web.authenticated
    async def post(self) -> None:
        try:
            body = json.loads(self.request.body or b"{}")
            path = body.get("path")
            if not isinstance(path, str) or not path:
                raise SpecError('export: the body needs "path": the notebook to export, relative to the server root.')
            root = self.settings.get("server_root_dir") or "."
            result = await self.run_blocking(lambda: _export(root, path, body))
            self.write_json(result, 201)
        except Exception as error:  # noqa: BLE001
            self.write_error_json(error)


def _export(root: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """Export ``root/path`` to a job directory (``body["out"]``, default ``<notebook stem>-job`` beside it)."""
    from pathlib import Path

    from nbtrain.export import export_notebook

    notebook = (Path(root) / path).resolve()
    if not str(notebook).startswith(str(Path(root).resolve())):
        raise SpecError(f"export: {path!r} is outside the server's root directory.")
    out = Path(root) / body["out"] if body.get("out") else notebook.with_name(notebook.stem + "-job")
    kwargs: dict[str, Any] = {}
    if body.get("cell") is not None:
        kwargs["cell"] = body["cell"]
    if body.get("tag"):
        kwargs["tag"] = body["tag"]
    job = export_notebook(notebook, out, **kwargs)
    directory = Path(getattr(job, "directory", out))
    return {"path": str(directory.relative_to(Path(root).resolve()) if directory.is_absolute() and
                        str(directory).startswith(str(Path(root).resolve())) else directory),
            "files": sorted(p.name for p in directory.iterdir())}


class EventsHandler(_Base):
    """Server-sent events: the changed run summaries, checked every second, for at most an hour per stream."""

    @tornado.web.authenticated
    async def get(self) -> None:
        self.set_header("Content-Type", "text/event-stream")
        self.set_header("Cache-Control", "no-cache")
        seen: dict[str, str] = {}
        for _ in range(3600):
            rows = await self.run_blocking(lambda: [run_summary(r) for r in self.cache.all()])
            changed = [r for r in rows if seen.get(r["id"]) != _dumps(
                {k: r[k] for k in ("state", "attempt", "step", "failure")})]
            for row in changed:
                seen[row["id"]] = _dumps({k: row[k] for k in ("state", "attempt", "step", "failure")})
            if changed or _ == 0:
                self.write(f"data: {_dumps({'runs': changed})}\n\n")
            else:
                self.write(": keep-alive\n\n")
            try:
                await self.flush()
            except tornado.iostream.StreamClosedError:
                return
            await asyncio.sleep(1.0)
        self.finish()


def handlers() -> list[tuple[str, type]]:
    """The handler table, which reads as the REST map (jupyter_server adds its base_url in front)."""
    prefix = "/nbtrain"
    run = r"(?P<run_id>[a-z0-9][-a-z0-9]*)"
    return [
        (rf"{prefix}/runs", RunsHandler),
        (rf"{prefix}/runs/{run}", RunHandler),
        (rf"{prefix}/runs/{run}/logs/(?P<rank>\d+)", LogsHandler),
        (rf"{prefix}/runs/{run}/metrics", MetricsHandler),
        (rf"{prefix}/runs/{run}/cancel", CancelHandler),
        (rf"{prefix}/runs/{run}/resume", ResumeHandler),
        (rf"{prefix}/export", ExportHandler),
        (rf"{prefix}/events", EventsHandler),
    ]
