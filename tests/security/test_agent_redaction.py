"""The tracking agent's log and state file never show a URL's credentials, whichever URL a message names.

Before: the agent had its own redactor, which masked only the exact tracking URI it was started with. A message
naming credentials in any other spelling or URL (a proxy's, an artifact store's, the URI as MLflow rewrote it, or
any URL when the agent was started without MLFLOW_TRACKING_URI) reached ``tracking-agent.log`` (and the state file
``nbtrain status`` reads) with ``user:password@`` in it. Now both go through :func:`nbtrain.secrets.redact_url`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nbtrain.tracking import agent

MESSAGES = [
    "could not connect to https://alice:s3cret@mlflow.example.com:5000/base?token=abc (timeout)",
    "ProxyError: http://bob:hunter2@proxy.internal:3128 refused the connection",
    "artifact upload to s3://AKIDEXAMPLE:wJalrXUtnFEMI@bucket/mlruns/1 failed",
    "HTTPConnectionPool: https://alice:s3cret@MLFLOW.example.com:5000/api/2.0/mlflow/runs/create",  # as rewritten
]
CREDENTIALS = ["alice:s3cret@", "bob:hunter2@", "AKIDEXAMPLE:wJalrXUtnFEMI@", "token=abc"]


@pytest.mark.parametrize("message", MESSAGES)
def test_the_agent_log_never_shows_url_credentials(message: str, capsys: pytest.CaptureFixture[str]) -> None:
    agent._Log("t-000001")(message)
    line = capsys.readouterr().out
    assert "tracking agent" in line and "t-000001" in line
    assert not [c for c in CREDENTIALS if c in line], line
    host = message.split("@", 1)[1].split("/", 1)[0].split(" ", 1)[0]
    assert host in line  # where it failed is still said


@pytest.mark.parametrize("message", MESSAGES)
def test_the_agent_state_file_never_shows_url_credentials(message: str, tmp_path: Path) -> None:
    state = tmp_path / "tracking-agent.state.json"
    agent.write_state(state, message)
    text = state.read_text()
    assert not [c for c in CREDENTIALS if c in text], text
    data = json.loads(text)
    assert data["pid"] == os.getpid() and data["error"].startswith(message.split(":", 1)[0])
    agent.write_state(state, None)
    assert json.loads(state.read_text())["error"] is None
