"""REST authorisation: a read-only Jupyter user reads runs but cannot cancel, resume or export.

Before, the handlers only required an authenticated user: under an Authorizer that allows nothing but "read"
(as a deployment gives a read-only collaborator), ``POST /nbtrain/export`` wrote a job directory and ``POST
…/cancel`` cancelled a run. Now every handler asks the server's Authorizer about the resource ``nbtrain``
(read for GETs, execute for cancel/resume, write for export). A real jupyter server, configured with such an
Authorizer.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import tornado.httpclient
from jupyter_server.auth.authorizer import Authorizer

from nbtrain.spec import JobSpec
from nbtrain.store import RunRecord, Store

ASKED: list[tuple[str, str]] = []


class ReadOnlyAuthorizer(Authorizer):
    """Allows every resource's "read" and nothing else (and notes what it was asked)."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        ASKED.append((action, resource))
        return action == "read"


@pytest.fixture
def jp_server_config(home: Path) -> dict[str, Any]:
    return {"ServerApp": {"jpserver_extensions": {"nbtrain": True}, "authorizer_class": ReadOnlyAuthorizer}}


def _runs(home: Path) -> tuple[str, str]:
    """A pending run (what cancel would end) and a failed one with a checkpoint (what resume would restart)."""
    store = Store(home)
    pending, failed = "waiting-000001", "broken-000002"
    store.save(RunRecord(pending, JobSpec(name="waiting", procs_per_node=1), "0" * 64, "local", handle={"attempt": 0}))
    store.save(RunRecord(failed, JobSpec(name="broken", procs_per_node=1), "0" * 64, "local", handle={"attempt": 0},
                         state="failed", ended=time.time(),
                         checkpoints=[{"attempt": 0, "step": 3, "path": str(home / "ckpt")}]))
    log = store.attempt_dir(pending, 0) / "logs" / "rank-0.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("hello\n")
    return pending, failed


async def _status(jp_fetch: Any, *parts: str, method: str = "GET", body: str | None = None) -> int:
    try:
        response = await jp_fetch(*parts, method=method, body=body)
    except tornado.httpclient.HTTPClientError as error:
        assert error.response is not None
        assert json.loads(error.response.body)["message"]  # a JSON error, as every nbtrain answer
        return error.code
    json.loads(response.body)
    return response.code


async def test_a_read_only_user_reads_but_cannot_cancel_resume_or_export(
    jp_fetch: Any, home: Path, jp_root_dir: Path
) -> None:
    pending, failed = _runs(home)
    shutil.copy(Path(__file__).resolve().parents[2] / "examples" / "quickstart.ipynb", jp_root_dir / "qs.ipynb")
    before = {p: p.read_bytes() for p in home.rglob("record.json")}
    ASKED.clear()

    assert await _status(jp_fetch, "nbtrain", "runs") == 200
    assert await _status(jp_fetch, "nbtrain", "runs", pending) == 200
    assert await _status(jp_fetch, "nbtrain", "runs", pending, "logs", "0") == 200
    assert await _status(jp_fetch, "nbtrain", "runs", pending, "metrics") == 200

    assert await _status(jp_fetch, "nbtrain", "runs", pending, "cancel", method="POST", body="") == 403
    assert await _status(jp_fetch, "nbtrain", "runs", failed, "resume", method="POST", body="") == 403
    assert await _status(jp_fetch, "nbtrain", "export", method="POST", body=json.dumps({"path": "qs.ipynb"})) == 403

    assert {p: p.read_bytes() for p in home.rglob("record.json")} == before  # nothing cancelled or resumed
    assert Store(home).load(pending).state == "pending"
    assert sorted(p.name for p in jp_root_dir.iterdir()) == ["qs.ipynb"]  # nothing exported
    # the deployment's Authorizer decided, about nbtrain's own resource
    assert {("read", "nbtrain"), ("execute", "nbtrain"), ("write", "nbtrain")} <= set(ASKED)


async def test_a_read_only_user_can_watch_the_event_stream(
    jp_serverapp: Any, jp_base_url: str, http_server_client: Any, home: Path
) -> None:
    _runs(home)
    chunks: list[bytes] = []
    token = jp_serverapp.identity_provider.token
    with pytest.raises(tornado.httpclient.HTTPClientError) as caught:  # we hang up: a stream never ends
        await http_server_client.fetch(jp_base_url + "nbtrain/events", headers={"Authorization": f"token {token}"},
                                       streaming_callback=chunks.append, request_timeout=2.5)
    assert caught.value.code == 599  # our timeout, not a refusal
    first = json.loads(b"".join(chunks).decode().split("data: ", 1)[1].split("\n\n", 1)[0])
    assert sorted(r["id"] for r in first["runs"]) == ["broken-000002", "waiting-000001"]


async def test_a_read_only_user_sees_only_the_env_values_marked_public(jp_fetch: Any, home: Path) -> None:
    """Issue 28: no secret heuristic is complete (DB_PASS, a webhook URL...), so a user who may not start runs sees
    every --env value masked but those the run marked --env-public (and values that hold nothing, such as 1)."""
    store, run_id = Store(home), "envy-000003"
    spec = JobSpec(name="envy", env={"SEED": "5", "NOTE": "s3cr3t-but-unnamed", "DEBUG": "1", "LR": "3e-4"},
                   env_public=("LR",))
    store.save(RunRecord(run_id, spec, "0" * 64, "local", handle={"attempt": 0}, state="succeeded",
                         ended=time.time()))
    body = (await jp_fetch("nbtrain", "runs", run_id)).body
    assert b"s3cr3t-but-unnamed" not in body
    assert json.loads(body)["spec"]["env"] == {"SEED": "***", "NOTE": "***", "DEBUG": "1", "LR": "3e-4"}
