"""Malformed input to every REST route of a real server: never a 500, always a JSON answer.

Hypothesis (bounded: 150 examples per group, no deadline, no example database) sends odd path ids and ranks,
query parameters that are not numbers or are huge (``/nbtrain/stats``' ``since`` and ``format`` too, and
``/nbtrain/profiles``' ``path``), and bodies that are not JSON, not objects, or objects with fields of every type,
from a thread, to a real jupyter server with the nbtrain extension over a real socket.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import nbformat
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from nbformat.v4 import new_code_cell, new_notebook

from nbtrain.spec import JobSpec
from nbtrain.store import RunRecord, Store, write_json_atomic

RUN = "fuzzed-000001"
FUZZ = settings(max_examples=150, deadline=None, database=None, derandomize=True,
                suppress_health_check=list(HealthCheck))


@pytest.fixture
def jp_server_config(home: Path) -> dict[str, Any]:
    return {"ServerApp": {"jpserver_extensions": {"nbtrain": True}}}


def _seed(home: Path, root: Path) -> None:
    store = Store(home)
    store.save(RunRecord(RUN, JobSpec(name="fuzzed", procs_per_node=2), "0" * 64, "local", handle={"attempt": 0},
                         state="failed", ended=time.time()))
    log = store.attempt_dir(RUN, 0) / "logs" / "rank-0.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("".join(f"line {i}\n" for i in range(50)))
    write_json_atomic(store.attempt_dir(RUN, 0) / "status.json", {  # the supervisor's verdict: a finished run
        "state": "failed", "attempt": 0, "started": time.time() - 5, "ended": time.time(), "failure": None,
        "retrying": False, "supervisor_pid": os.getpid(), "launchers": []})
    nbformat.write(new_notebook(cells=[new_code_cell("%%distributed\nprint('x')")]), str(root / "nb.ipynb"))


def _strict(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


class Client:
    """Blocking requests to the server under test, from a thread (the server runs on the test's event loop)."""

    def __init__(self, port: int, base_url: str, token: str) -> None:
        self.port, self.base, self.token = port, base_url.rstrip("/") + "/nbtrain/", token

    def request(self, method: str, path: str, body: bytes | None = None, *, text_ok: bool = False) -> tuple[int, Any]:
        """The status and the parsed JSON answer; with ``text_ok``, a 200 may be text/plain (returned as str)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(method, self.base + path, body=body,
                               headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"})
            response = connection.getresponse()
            status, data, kind = response.status, response.read(), response.getheader("Content-Type", "")
        finally:
            connection.close()
        assert status < 500, f"{method} {path} {body!r:.200} -> {status} {data[:300]!r}"
        if text_ok and status == 200 and kind.startswith("text/plain"):
            return status, data.decode("utf-8")
        assert kind.startswith("application/json"), f"{method} {path} -> {status} {kind} {data[:200]!r}"
        answer = json.loads(data, parse_constant=_strict)
        if status >= 400:
            assert isinstance(answer, dict) and isinstance(answer.get("message"), str), answer
        return status, answer


ids = st.one_of(st.just(RUN), st.just(RUN[:4]), st.text(max_size=24), st.sampled_from(
    ["..", "%2e%2e", "../../etc", "UPPER-1", "a" * 300, "-x", "nope-000000", "\x00", "run id", "%"]))
numbers = st.one_of(st.none(), st.integers(min_value=-(10**30), max_value=10**30).map(str), st.text(max_size=12),
                    st.sampled_from(["", "1e3", "0x10", "NaN", "-0", " 5", "9" * 5000, "١٢"]))
durations = st.one_of(numbers, st.sampled_from(
    ["30d", "all", "ALL", "1.5h", "2w", "0", "0s", "-1d", "nan", "inf", "-inf", "1e308w", "9e307d", "1e400", "d", "w",
     "30 d", "30dd", "0x1Fd", "∞", "\x00"]))
formats = st.one_of(st.none(), st.sampled_from(["json", "prometheus", "JSON", "", "xml", "prometheus\x00", "a" * 500]),
                    st.text(max_size=12))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


def _segment(text: str) -> str:
    return quote(text, safe="")


def _query(params: dict[str, str | None]) -> str:
    kept = {k: v for k, v in params.items() if v is not None}
    return "?" + urlencode(kept) if kept else ""


def _fuzz(client: Client) -> None:
    @FUZZ
    @given(route=st.sampled_from(["list", "detail", "logs", "metrics", "cancel", "resume", "unknown"]), run_id=ids,
           rank=st.one_of(st.integers(min_value=-5, max_value=10**9).map(str), st.text(max_size=10)),
           a=numbers, b=numbers, c=numbers, body=st.one_of(st.none(), st.binary(max_size=40)))
    def routes(route: str, run_id: str, rank: str, a: str | None, b: str | None, c: str | None,
               body: bytes | None) -> None:
        run = _segment(run_id)
        if route == "list":
            client.request("GET", "runs" + _query({"state": a, "backend": b}))
        elif route == "detail":
            client.request("GET", f"runs/{run}")
        elif route == "logs":
            client.request("GET", f"runs/{run}/logs/{_segment(rank)}" + _query({"offset": a, "limit": b, "attempt": c}))
        elif route == "metrics":
            client.request("GET", f"runs/{run}/metrics" + _query({"rank": a, "last": b}))
        elif route in ("cancel", "resume"):
            client.request("POST", f"runs/{run}/{route}", body or b"")
        else:
            client.request("GET", f"{run}/{_segment(rank)}")

    @FUZZ
    @given(body=st.one_of(
        st.binary(max_size=60),
        json_values.map(lambda v: json.dumps(v).encode()),
        st.fixed_dictionaries({}, optional={
            "path": st.one_of(json_values, st.sampled_from(["nb.ipynb", "../nb.ipynb", "/etc/passwd", "missing.ipynb",
                                                            "nb.ipynb/..", "."])),
            "out": st.one_of(json_values, st.sampled_from(["job", "../job", "/tmp/job", ".", "", "a/../../b"])),
            "cell": json_values, "tag": json_values,
        }).map(lambda v: json.dumps(v).encode()),
    ))
    def export(body: bytes) -> None:
        client.request("POST", "export", body)

    @FUZZ
    @given(since=durations, output=formats, extra=numbers)
    @example(since="1e308w", output="json", extra=None)  # a finite number of weeks, an infinite number of seconds
    @example(since="1e308w", output="prometheus", extra=None)
    @example(since="nan", output="json", extra=None)
    def stats(since: str | None, output: str | None, extra: str | None) -> None:
        status, answer = client.request("GET", "stats" + _query({"since": since, "format": output, "x": extra}),
                                        text_ok=True)
        if status == 200 and isinstance(answer, str):  # format=prometheus (tornado drops control characters)
            assert output is not None and "prometheus" in output and answer.startswith("# HELP "), (output, answer)
        elif status == 200:
            assert isinstance(answer, dict)
        else:
            assert status == 400, (since, output, status, answer)

    @settings(FUZZ, max_examples=40)  # each answer loads the whole catalog of profiles
    @given(path=st.one_of(st.none(), st.text(max_size=30), st.sampled_from(
        ["nb.ipynb", "../nb.ipynb", "/etc/passwd", ".", "..", "a" * 5000, "\x00", "nb.ipynb/../..", "~/x"])))
    def profiles(path: str | None) -> None:
        status, answer = client.request("GET", "profiles" + _query({"path": path}))
        if status == 200:
            assert isinstance(answer["profiles"], list) and isinstance(answer["unreadable"], list)
        else:
            assert status == 400, (path, status, answer)

    routes()
    export()
    stats()
    profiles()


async def test_every_route_answers_malformed_input_with_json_and_never_a_500(
    jp_serverapp: Any, jp_http_port: int, jp_base_url: str, http_server_client: Any, home: Path, jp_root_dir: Path
) -> None:
    """(``http_server_client`` makes the server accept connections on ``jp_http_port``.)"""
    _seed(home, jp_root_dir)
    client = Client(jp_http_port, jp_base_url, jp_serverapp.identity_provider.token)
    started = time.monotonic()
    await asyncio.get_running_loop().run_in_executor(None, _fuzz, client)
    assert time.monotonic() - started < 120
