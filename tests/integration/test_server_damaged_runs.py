"""The REST list survives damaged run files (issue 28): each is left out and named with its file, the other runs
are listed, and the detail of a damaged run is a JSON error naming the file (not a 500 traceback). A real server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tornado.httpclient

from nbtrain.spec import JobSpec
from nbtrain.store import RunRecord, Store


@pytest.fixture
def jp_server_config(home: Path) -> dict[str, Any]:
    return {"ServerApp": {"jpserver_extensions": {"nbtrain": True}}}


async def test_the_list_names_each_damaged_run_and_file_and_lists_the_others(jp_fetch: Any, home: Path) -> None:
    store = Store(home)
    ids = {name: f"{name}-00000{i}" for i, name in enumerate(("good", "badstate", "listrec", "trunc"))}
    for name, run_id in ids.items():
        store.save(RunRecord(run_id, JobSpec(name=name), "0" * 64, "local", handle={"attempt": 0}, state="succeeded"))
    attempt = store.attempt_dir(ids["badstate"], 0)
    attempt.mkdir(parents=True)
    (attempt / "status.json").write_text('{"state": 5, "attempt": 0}')
    (store.run_dir(ids["listrec"]) / "record.json").write_text("[1, 2]")
    record = store.run_dir(ids["trunc"]) / "record.json"
    record.write_text(record.read_text()[:50])

    listing = json.loads((await jp_fetch("nbtrain", "runs")).body)
    assert [row["id"] for row in listing["runs"]] == [ids["good"]]
    said = {entry["id"]: entry["message"] for entry in listing["unreadable"]}
    assert set(said) == {ids["badstate"], ids["listrec"], ids["trunc"]}
    assert "status.json: state 5 is not a run state nbtrain writes" in said[ids["badstate"]]
    assert f"{store.run_dir(ids['listrec']) / 'record.json'} is not a run record" in said[ids["listrec"]]
    assert f"{store.run_dir(ids['trunc']) / 'record.json'}: not valid JSON" in said[ids["trunc"]]
    with pytest.raises(tornado.httpclient.HTTPClientError) as caught:
        await jp_fetch("nbtrain", "runs", ids["listrec"])
    assert caught.value.response is not None and caught.value.code != 500
    assert "is not a run record nbtrain can read" in json.loads(caught.value.response.body)["message"]
