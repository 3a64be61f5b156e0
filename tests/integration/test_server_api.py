"""The jupyter_server extension: a real server, the real store, real local runs."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import tornado.httpclient

import nbtrain
from nbtrain.bundle import capture_cell
from nbtrain.client import submit_bundle
from nbtrain.spec import JobSpec

pytestmark = pytest.mark.slow

SCHEMA = json.loads((Path(nbtrain.__file__).parent / "schemas" / "run-summary.schema.json").read_text())

QUICK = '''
from accelerate import Accelerator
accelerator = Accelerator()
for step in range(5):
    accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
    print(f"rank {accelerator.process_index} step {step}", flush=True)
'''

SLOW = '''
import time
from accelerate import Accelerator
accelerator = Accelerator()
for step in range(10_000):
    accelerator.log({"loss": 1.0}, step=step)
    time.sleep(0.1)
'''


@pytest.fixture
def jp_server_config(home: Path) -> dict[str, Any]:
    return {"ServerApp": {"jpserver_extensions": {"nbtrain": True}}}


def _submit(code: str, name: str) -> Any:
    return submit_bundle(capture_cell(code, {"__name__": "__main__"}), JobSpec(name=name, procs_per_node=2))


def _strict(constant: str) -> Any:
    raise AssertionError(f"the server sent {constant}, which is not JSON")


async def _json(jp_fetch: Any, *parts: str, method: str = "GET", body: str | None = None, **params: str) -> Any:
    response = await jp_fetch(*parts, method=method, body=body, params=params or None)
    return json.loads(response.body, parse_constant=_strict)  # NaN/Infinity fail the test


async def test_list_detail_logs_metrics(jp_fetch: Any, survivors: Any) -> None:
    run = _submit(QUICK, "served")
    await asyncio.get_running_loop().run_in_executor(None, run.wait)
    listing = await _json(jp_fetch, "nbtrain", "runs")
    (row,) = listing["runs"]
    jsonschema.validate(row, SCHEMA)  # the row is a RunSummary, the model the TypeScript parser is tested on
    assert row["id"] == run.id and row["state"] == "succeeded" and row["world_size"] == 2
    assert row["failure"] is None and row["failed_rank"] is None and row["can_resume"] is False
    assert row["attach_code"].startswith("import nbtrain")
    assert (await _json(jp_fetch, "nbtrain", "runs", state="running"))["runs"] == []
    detail = await _json(jp_fetch, "nbtrain", "runs", run.id)
    assert detail["spec"]["procs_per_node"] == 2 and detail["last_metrics"] == {"loss": 0.2}
    page = await _json(jp_fetch, "nbtrain", "runs", run.id, "logs", "1", offset="1", limit="2")
    assert page["lines"] == ["rank 1 step 1", "rank 1 step 2"] and page["total"] == 5
    tail = await _json(jp_fetch, "nbtrain", "runs", run.id, "logs", "0", offset="-1")
    assert tail["lines"] == ["rank 0 step 4"] and tail["offset"] == tail["total"] - 1
    metrics = await _json(jp_fetch, "nbtrain", "runs", run.id, "metrics", last="2")
    assert metrics["metrics"]["loss"] == [[3, 0.25], [4, 0.2]]


def _run_with_logs(home: Path, run_id: str, logs: dict[int, bytes]) -> None:
    """A finished run record whose rank-0 log in attempt ``n`` is ``logs[n]`` (the handle follows the last)."""
    from nbtrain.store import RunRecord, Store

    store = Store(home)
    store.save(RunRecord(run_id, JobSpec(name=run_id.split("-")[0], procs_per_node=1), "0" * 64, "local",
                         handle={"attempt": max(logs)}, state="succeeded", ended=time.time()))
    for attempt, data in logs.items():
        path = store.attempt_dir(run_id, attempt) / "logs" / "rank-0.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


async def test_log_pages_by_line_number_from_the_end_and_per_attempt(jp_fetch: Any, home: Path) -> None:
    lines = [f"line {i}" for i in range(3000)]
    _run_with_logs(home, "paged-000001", {0: b"old attempt\n",
                                           1: "".join(x + "\r\n" for x in lines).encode() + b"half writ"})
    page = await _json(jp_fetch, "nbtrain", "runs", "paged-000001", "logs", "0", offset="1500", limit="3")
    assert page == {"run": "paged-000001", "rank": 0, "attempt": 1, "offset": 1500, "total": 3000,
                    "lines": lines[1500:1503]}
    tail = await _json(jp_fetch, "nbtrain", "runs", "paged-000001", "logs", "0", offset="-2")
    assert (tail["offset"], tail["total"], tail["lines"]) == (2998, 3000, lines[-2:])  # no half-written line
    count = await _json(jp_fetch, "nbtrain", "runs", "paged-000001", "logs", "0", offset="0", limit="0")
    assert (count["lines"], count["total"]) == ([], 3000)
    past = await _json(jp_fetch, "nbtrain", "runs", "paged-000001", "logs", "0", offset="5000")
    assert (past["offset"], past["lines"]) == (5000, [])
    first = await _json(jp_fetch, "nbtrain", "runs", "paged-000001", "logs", "0", attempt="0")
    assert (first["attempt"], first["lines"]) == (0, ["old attempt"])
    missing = await _json(jp_fetch, "nbtrain", "runs", "paged-000001", "logs", "7", offset="-10")
    assert (missing["lines"], missing["total"]) == ([], 0)
    with pytest.raises(tornado.httpclient.HTTPClientError) as caught:
        await jp_fetch("nbtrain", "runs", "paged-000001", "logs", "0", params={"offset": "ten"})
    assert caught.value.code == 400


async def test_bodies_are_strict_json_when_metrics_are_not_finite(jp_fetch: Any, home: Path) -> None:
    """A NaN loss (training diverged) or an infinite value is sent as null: browsers' JSON.parse refuses NaN."""
    import os

    from nbtrain.events import EventKind, EventWriter
    from nbtrain.model import Failure
    from nbtrain.store import RunRecord, Store, write_json_atomic

    store, run_id = Store(home), "diverged-000001"
    failure = Failure(reason="the training code raised", rank=0, node=0, exc_type="FloatingPointError",
                      message="loss is nan")
    store.save(RunRecord(run_id, JobSpec(name="diverged", procs_per_node=1), "0" * 64, "local", handle={"attempt": 0}))
    attempt = store.attempt_dir(run_id, 0)
    rank0 = EventWriter(attempt / "events" / "rank-0.jsonl", "rank-0", rank=0)
    rank0.emit(EventKind.METRIC, step=0, values={"loss": 2.5, "grad_norm": 1.0})
    rank0.emit(EventKind.METRIC, step=1, values={"loss": float("nan"), "grad_norm": float("inf")})
    supervisor = EventWriter(attempt / "events" / "supervisor.jsonl", "supervisor")
    supervisor.emit(EventKind.STATE, state="starting", reason="")
    supervisor.emit(EventKind.FAILURE, **failure.to_dict())
    supervisor.emit(EventKind.STATE, state="failed", reason="")
    write_json_atomic(attempt / "status.json", {
        "state": "failed", "attempt": 0, "started": time.time() - 5, "ended": time.time(),
        "failure": failure.to_dict(), "retrying": False, "supervisor_pid": os.getpid(), "launchers": []})

    (row,) = (await _json(jp_fetch, "nbtrain", "runs"))["runs"]
    jsonschema.validate(row, SCHEMA)
    assert row["state"] == "failed" and row["failed_rank"] == 0 and row["failure"].startswith("rank 0 (node 0)")
    detail = await _json(jp_fetch, "nbtrain", "runs", run_id)
    assert detail["last_metrics"] == {"loss": None, "grad_norm": None}
    assert detail["failure_detail"]["exc_type"] == "FloatingPointError"
    metrics = await _json(jp_fetch, "nbtrain", "runs", run_id, "metrics")
    assert metrics["metrics"] == {"loss": [[0, 2.5], [1, None]], "grad_norm": [[0, 1.0], [1, None]]}


async def test_cancel_from_the_server_ends_the_gang(jp_fetch: Any, survivors: Any) -> None:
    run = _submit(SLOW, "slowserved")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and run.status().value != "running":
        await asyncio.sleep(0.2)
    row = await _json(jp_fetch, "nbtrain", "runs", run.id, "cancel", method="POST", body="")
    assert row["state"] == "cancelled"
    assert survivors({run.id}) == []


async def test_errors_are_json_with_fitting_status(jp_fetch: Any) -> None:
    with pytest.raises(tornado.httpclient.HTTPClientError) as caught:
        await jp_fetch("nbtrain", "runs", "nope-000000")
    assert caught.value.code == 404
    assert "no run 'nope-000000'" in json.loads(caught.value.response.body)["message"]
    with pytest.raises(tornado.httpclient.HTTPClientError) as caught:
        await jp_fetch("nbtrain", "export", method="POST", body="{}")
    assert caught.value.code == 400


async def test_unauthenticated_requests_are_refused(jp_serverapp: Any, jp_base_url: str,
                                                    http_server_client: Any) -> None:
    # the same in-process server jp_fetch talks to, but without the token jp_fetch adds
    for path, method in (("nbtrain/runs", "GET"), ("nbtrain/events", "GET"), ("nbtrain/runs/x-1/cancel", "POST"),
                         ("nbtrain/export", "POST")):
        with pytest.raises(tornado.httpclient.HTTPClientError) as caught:
            await http_server_client.fetch(jp_base_url + path, method=method, body="" if method == "POST" else None)
        assert caught.value.code == 403, path


async def test_events_stream_reports_runs(jp_serverapp: Any, jp_base_url: str, http_server_client: Any) -> None:
    run = _submit(QUICK, "streamed")
    await asyncio.get_running_loop().run_in_executor(None, run.wait)
    chunks: list[bytes] = []
    token = jp_serverapp.identity_provider.token
    with pytest.raises(tornado.httpclient.HTTPClientError):  # we hang up after a few seconds: a stream never ends
        await http_server_client.fetch(jp_base_url + "nbtrain/events", headers={"Authorization": f"token {token}"},
                                       streaming_callback=chunks.append, request_timeout=3)
    text = b"".join(chunks).decode()
    first = json.loads(text.split("data: ", 1)[1].split("\n\n", 1)[0])
    assert [r["id"] for r in first["runs"]] == [run.id] and first["runs"][0]["state"] == "succeeded"
    assert ": keep-alive" in text


async def test_export_a_notebook_to_a_job_directory(jp_fetch: Any, jp_root_dir: Path) -> None:
    import shutil

    shutil.copy(Path(__file__).resolve().parents[2] / "examples" / "quickstart.ipynb", jp_root_dir / "qs.ipynb")
    response = await jp_fetch("nbtrain", "export", method="POST", body=json.dumps({"path": "qs.ipynb"}))
    assert response.code == 201
    result = json.loads(response.body)
    assert {"train.py", "nbtrain.toml", "requirements.txt", "README.md"} <= set(result["files"])
    assert (jp_root_dir / result["path"] / "train.py").is_file()
    assert result["cell"].startswith("cell ") and result["notes"] == []  # which cell: the response says


async def test_export_takes_the_cell_the_user_is_on(jp_fetch: Any, jp_root_dir: Path) -> None:
    """The lab's export sends the active %%distributed cell's id: that cell, not the notebook's last."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    cells = [new_code_cell("%%distributed --name first\nprint(1)"), new_code_cell("%%distributed --name last\nprint(2)")]
    nbformat.write(new_notebook(cells=cells), str(jp_root_dir / "two.ipynb"))
    picked = json.loads((await jp_fetch("nbtrain", "export", method="POST",
                                        body=json.dumps({"path": "two.ipynb", "cell": cells[0].id}))).body)
    assert picked["cell"] == f"cell 1 (id {cells[0].id})" and picked["notes"] == []
    assert 'name = "first"' in (jp_root_dir / picked["path"] / "nbtrain.toml").read_text()
    default = json.loads((await jp_fetch("nbtrain", "export", method="POST", body=json.dumps({"path": "two.ipynb"}))).body)
    assert default["cell"] == f"cell 2 (id {cells[1].id})"  # no cell sent: the last, and the note says so
    assert default["notes"] and "exported the last" in default["notes"][0]
    with pytest.raises(tornado.httpclient.HTTPClientError) as caught:
        await jp_fetch("nbtrain", "export", method="POST", body=json.dumps({"path": "../outside.ipynb"}))
    assert caught.value.code == 400


async def test_search_finds_lines_in_the_whole_log_page_by_page(jp_fetch: Any, home: Path) -> None:
    lines = [f"line {i}" for i in range(30_000)]
    _run_with_logs(home, "search-000001", {0: "".join(x + "\n" for x in lines).encode()})
    found = await _json(jp_fetch, "nbtrain", "runs", "search-000001", "search", q="LINE 2999")
    assert [(m["rank"], m["line"], m["text"]) for m in found["matches"]] == [
        (0, n, f"line {n}") for n in (2999, *range(29990, 30000))]
    assert found["next"] is None and found["ranks"] == [0] and found["scanned"] == 30_000
    first = await _json(jp_fetch, "nbtrain", "runs", "search-000001", "search", q="line 1", limit="2")
    assert [m["line"] for m in first["matches"]] == [1, 10] and first["next"] == {"rank": 0, "line": 11}
    more = await _json(jp_fetch, "nbtrain", "runs", "search-000001", "search", q="line 1", limit="2", rank="0",
                       line="11")
    assert [m["line"] for m in more["matches"]] == [11, 12]
    with pytest.raises(tornado.httpclient.HTTPClientError) as caught:
        await jp_fetch("nbtrain", "runs", "search-000001", "search", params={"q": " "})
    assert caught.value.code == 400
