"""What the server holds and does per client is bounded, and one bad run never breaks the others.

Before: one malformed record.json made ``GET /nbtrain/runs`` and every event stream fail; the run cache kept
every run it ever saw; each event-stream client listed the whole store every second, with no limit on clients.
Now: a bad run is left out (logged once, named under ``"unreadable"``), at most ``run_cache_size`` handles are
kept (LRU), one poller lists the store for every stream, and streams above ``max_event_streams`` get 503.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest
import tornado.httpclient

from nbtrain.spec import JobSpec
from nbtrain.store import RunRecord, Store

STREAMS = 3


@pytest.fixture
def jp_server_config(home: Path) -> dict[str, Any]:
    return {"ServerApp": {"jpserver_extensions": {"nbtrain": True}},
            "NbtrainExtension": {"max_event_streams": STREAMS}}


def _finished(home: Path, run_id: str) -> None:
    Store(home).save(RunRecord(run_id, JobSpec(name=run_id.split("-")[0], procs_per_node=1), "0" * 64, "local",
                               handle={"attempt": 0}, state="succeeded", ended=time.time()))


def _bad_records(home: Path) -> list[str]:
    """A record that is not JSON, one whose spec this version refuses, and one naming another run."""
    runs = home / "runs"
    for run_id, text in (
        ("garbled-000001", "{not json"),
        ("refused-000002", json.dumps({"run_id": "refused-000002", "spec": {"nodes": "many"}, "bundle_digest": "0",
                                       "backend": "local"})),
        ("imposter-000003", json.dumps({"run_id": "../../elsewhere", "spec": {}, "bundle_digest": "0",
                                        "backend": "local"})),
    ):
        (runs / run_id).mkdir(parents=True)
        (runs / run_id / "record.json").write_text(text)
    return ["garbled-000001", "imposter-000003", "refused-000002"]


async def _stream(jp_serverapp: Any, jp_base_url: str, http_server_client: Any, seconds: float) -> tuple[int, str]:
    """Listen to /nbtrain/events for ``seconds``: (status, text); 599 is our own hang-up (a stream never ends)."""
    chunks: list[bytes] = []
    token = jp_serverapp.identity_provider.token
    try:
        response = await http_server_client.fetch(
            jp_base_url + "nbtrain/events", headers={"Authorization": f"token {token}"},
            streaming_callback=chunks.append, request_timeout=seconds)
        return response.code, b"".join(chunks).decode()
    except tornado.httpclient.HTTPClientError as error:
        body = error.response.body.decode() if error.response is not None and error.code != 599 else ""
        return error.code, b"".join(chunks).decode() or body


def _first_runs(text: str) -> list[str]:
    return [r["id"] for r in json.loads(text.split("data: ", 1)[1].split("\n\n", 1)[0])["runs"]]


async def test_a_bad_record_is_left_out_and_named_never_breaking_the_list(
    jp_fetch: Any, jp_serverapp: Any, jp_base_url: str, http_server_client: Any, home: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _finished(home, "good-000009")
    bad = _bad_records(home)
    with caplog.at_level(logging.WARNING, logger="nbtrain.server"):
        for _ in range(2):
            listing = json.loads((await jp_fetch("nbtrain", "runs")).body)
            assert [r["id"] for r in listing["runs"]] == ["good-000009"]
            assert sorted(u["id"] for u in listing["unreadable"]) == bad
    assert all("cannot be read" in u["message"] for u in listing["unreadable"])
    warnings = [r.getMessage() for r in caplog.records if r.name == "nbtrain.server"]
    assert sorted(w.split("run ", 1)[1].split(" ", 1)[0] for w in warnings) == bad  # each logged once
    status, text = await _stream(jp_serverapp, jp_base_url, http_server_client, 2.5)
    assert status == 599 and _first_runs(text) == ["good-000009"]
    detail = json.loads((await jp_fetch("nbtrain", "runs", "good-000009")).body)
    assert detail["id"] == "good-000009"


def test_the_run_cache_is_bounded(home: Path) -> None:
    from nbtrain.server.runs import RunCache

    ids = [f"r{i}-00000{i}" for i in range(6)]
    for run_id in ids:
        _finished(home, run_id)
    cache = RunCache(Store(home), capacity=4)
    assert sorted(r["id"] for r in cache.listing().rows) == ids
    assert len(cache) == 4  # the least recently used went
    assert cache.get(ids[0]).id == ids[0] and len(cache) == 4  # an evicted run is read again when asked for


async def test_one_poller_feeds_every_event_stream(
    jp_serverapp: Any, jp_base_url: str, http_server_client: Any, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _finished(home, "watched-000001")
    listed: list[float] = []
    original = Store.ids

    def counting(self: Store) -> list[str]:
        listed.append(time.monotonic())
        return original(self)

    monkeypatch.setattr(Store, "ids", counting)
    results = await asyncio.gather(*(_stream(jp_serverapp, jp_base_url, http_server_client, 3.2)
                                     for _ in range(STREAMS)))
    for status, text in results:
        assert status == 599 and _first_runs(text) == ["watched-000001"]
    # about one listing per second for all streams together (each stream listing on its own: 3 per second)
    assert len(listed) <= 5, f"the store was listed {len(listed)} times for {STREAMS} streams in 3.2 s"


async def test_streams_above_the_cap_get_503_with_retry_after(
    jp_serverapp: Any, jp_base_url: str, http_server_client: Any, home: Path
) -> None:
    _finished(home, "popular-000001")
    held = [asyncio.ensure_future(_stream(jp_serverapp, jp_base_url, http_server_client, 3.0))
            for _ in range(STREAMS)]
    await asyncio.sleep(1.0)
    token = jp_serverapp.identity_provider.token
    with pytest.raises(tornado.httpclient.HTTPClientError) as caught:
        await http_server_client.fetch(jp_base_url + "nbtrain/events", headers={"Authorization": f"token {token}"},
                                       request_timeout=5)
    assert caught.value.code == 503 and caught.value.response is not None
    assert int(caught.value.response.headers["Retry-After"]) > 0
    answer = json.loads(caught.value.response.body)
    assert answer["error"] == "TooManyStreams" and "max_event_streams" in answer["message"]
    await asyncio.gather(*held)
    await asyncio.sleep(0.5)  # the server notices the closed streams
    status, text = await _stream(jp_serverapp, jp_base_url, http_server_client, 2.0)  # a slot is free again
    assert status == 599 and _first_runs(text) == ["popular-000001"]
