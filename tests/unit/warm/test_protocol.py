"""The agents' control messages (nbtrain/warm/protocol.py): typed both ways, and a malformed one refused by the agent
before anything is forked (the channel is a trust boundary)."""

from __future__ import annotations

import socket
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from nbtrain.warm import protocol
from nbtrain.warm.agent import Agent

FORK = protocol.ForkRanks(generation=3, run_id="job-1", ranks=(2, 3), argv=("python", "-m", "x"),
                          env={"A": "1"}, cwd="/work", bundle_dir="/b",
                          store=protocol.StoreAddress(addr="127.0.0.1", port=29500))


@pytest.mark.parametrize("message", [
    protocol.Ping(), protocol.Stop(), FORK, protocol.Poll(generation=3), protocol.End(generation=3, grace_s=0.0),
    protocol.StartStore(generation=1, host="10.0.0.1", supervisor="123:456"),
    protocol.Supervise(attempt_dir="/a", env={"PATH": "/bin"}, cwd="/w", log="/a/supervisor.log"),
], ids=lambda m: m.op)
def test_every_message_reads_back_as_sent(message: protocol.Message) -> None:
    sent = message.to_json()
    assert sent["op"] == message.op
    assert protocol.parse(sent) == message


def test_optional_keys_take_their_defaults() -> None:
    assert protocol.parse({"op": "store", "generation": 1}) == protocol.StartStore(generation=1)
    assert protocol.parse({"op": "end", "generation": 1}).grace_s == 3.0  # type: ignore[union-attr]


@pytest.mark.parametrize(("change", "said"), [
    ({"op": "exec"}, "unknown op 'exec'"),
    ({"op": None}, "unknown op None"),
    ({"ranks": None}, "missing key 'ranks'"),
    ({"shell": "rm -rf /"}, "unknown key(s) 'shell'"),
    ({"generation": "3"}, "'generation' must be a non-negative integer, not '3'"),
    ({"generation": True}, "'generation' must be a non-negative integer"),
    ({"ranks": [0, -1]}, "'ranks' must be a non-empty list of non-negative integers"),
    ({"ranks": []}, "'ranks' must be a non-empty list"),
    ({"argv": "python -m x"}, "'argv' must be a non-empty list of strings"),
    ({"env": {"A": 1}}, "'env' must be an object of string values"),
    ({"store": {"addr": "h", "port": 0}}, "'store' must be an object"),
    ({"store": {"addr": "h", "port": 1, "x": 2}}, "'store' must be an object"),
    ({"cwd": ["/"]}, "'cwd' must be a string"),
], ids=lambda v: str(v)[:30])
def test_a_malformed_fork_is_refused_naming_what_is_wrong(change: dict[str, Any], said: str) -> None:
    data = FORK.to_json()
    for key, value in change.items():
        if value is None and key != "op":
            del data[key]
        else:
            data[key] = value
    with pytest.raises(protocol.MessageError) as caught:
        protocol.parse(data)
    assert said in str(caught.value)


def test_the_agent_answers_a_malformed_message_with_an_error_and_forks_nothing() -> None:
    root = Path(tempfile.mkdtemp(prefix="nbt-", dir="/tmp"))  # a Unix socket path is short: not under tmp_path
    try:
        agent = Agent(root, 0)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(str(root / "node-0.sock"))
            listener.listen(1)
            answers: list[dict[str, Any]] = []

            def ask() -> None:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                    conn.settimeout(10)
                    conn.connect(str(root / "node-0.sock"))
                    protocol.write_message(conn, {**FORK.to_json(), "ranks": ["0; rm -rf /"]})
                    answers.append(protocol.read_message(conn))

            client = threading.Thread(target=ask)
            client.start()
            agent._answer(listener)
            client.join(timeout=10)
        assert answers and answers[0]["ok"] is False
        assert answers[0]["error"].startswith("MessageError: 'fork': 'ranks' must be")
        assert agent.generations == {} and agent.by_pid == {}  # nothing was forked
    finally:
        for path in root.iterdir():
            path.unlink()
        root.rmdir()
