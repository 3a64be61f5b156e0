"""``GET /nbtrain/stats`` on a real jupyter server over a store of known runs: the same document as
``nbtrain stats --json``, the Prometheus form, 400s for bad parameters, and the runs' authorisation (a user who
may read runs reads the figures; one who may not gets 403 for both)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import tornado.httpclient
from jupyter_server.auth.authorizer import Authorizer
from prometheus_client.parser import text_string_to_metric_families

from nbtrain.cli import main

from .test_stats import known_store

ASKED: list[tuple[str, str]] = []


class ReadOnlyAuthorizer(Authorizer):
    """Allows every resource's "read" and nothing else (as a deployment gives a read-only collaborator)."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        ASKED.append((action, resource))
        return action == "read"


class NoNbtrainAuthorizer(Authorizer):
    """Allows everything but the ``nbtrain`` resource."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return resource != "nbtrain"


@pytest.fixture(autouse=True)
def _no_mlflow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # the store alone, for the CLI and the server alike


@pytest.fixture
def jp_server_config(home: Path) -> dict[str, Any]:
    return {"ServerApp": {"jpserver_extensions": {"nbtrain": True}}}


async def _get(jp_fetch: Any, **params: str) -> Any:
    return await jp_fetch("nbtrain", "stats", params=params or None)


async def test_the_endpoint_returns_the_cli_document(jp_fetch: Any, home: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    known_store(home, time.time())
    for since in ("all", "30d"):
        served = json.loads((await _get(jp_fetch, since=since)).body)
        assert main(["stats", "--json", "--since", since]) == 0
        printed = json.loads(capsys.readouterr().out)
        # the clock moved between the two reads (now, and the window's start with it); nothing else may differ
        assert abs(served.pop("now") - printed.pop("now")) < 60
        starts = [doc["window"].pop("start") for doc in (served, printed)]
        assert (starts == [None, None]) if since == "all" else (abs(starts[0] - starts[1]) < 60)
        assert served == printed
    assert served["runs"]["total"] == 4 and served["checkpoint_recovery"]["rate"] == 1.0
    default = json.loads((await _get(jp_fetch)).body)
    assert default["window"]["seconds"] == 30 * 86400


async def test_prometheus_format_and_bad_parameters(jp_fetch: Any, home: Path) -> None:
    known_store(home, time.time())
    response = await _get(jp_fetch, format="prometheus", since="all")
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(response.body.decode()) for s in f.samples}
    assert samples[("nbtrain_runs", (("state", "succeeded"),))] == 3.0
    for params, expected in (({"since": "soon"}, "?since 'soon': expected a duration"),
                             ({"format": "xml"}, "?format='xml': expected 'json' or 'prometheus'")):
        with pytest.raises(tornado.httpclient.HTTPClientError) as caught:
            await _get(jp_fetch, **params)
        assert caught.value.code == 400
        assert caught.value.response is not None
        assert expected in json.loads(caught.value.response.body)["message"]


class TestReadOnlyUser:
    @pytest.fixture
    def jp_server_config(self, home: Path) -> dict[str, Any]:
        return {"ServerApp": {"jpserver_extensions": {"nbtrain": True}, "authorizer_class": ReadOnlyAuthorizer}}

    async def test_reads_the_figures_as_it_reads_runs(self, jp_fetch: Any, home: Path) -> None:
        known_store(home, time.time())
        ASKED.clear()
        assert (await _get(jp_fetch)).code == 200
        assert ASKED == [("read", "nbtrain")]


class TestUserWithoutRuns:
    @pytest.fixture
    def jp_server_config(self, home: Path) -> dict[str, Any]:
        return {"ServerApp": {"jpserver_extensions": {"nbtrain": True}, "authorizer_class": NoNbtrainAuthorizer}}

    async def test_is_refused_the_figures_as_it_is_refused_runs(self, jp_fetch: Any, home: Path) -> None:
        known_store(home, time.time())
        for parts in (("nbtrain", "runs"), ("nbtrain", "stats")):
            with pytest.raises(tornado.httpclient.HTTPClientError) as caught:
                await jp_fetch(*parts)
            assert caught.value.code == 403, parts
