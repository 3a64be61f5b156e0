"""The agents' control channel: one JSON request and one JSON answer per connection, over a private Unix socket.

The socket lives in the gang's directory of the (private, 0700) store, so only the store's owner reaches it.
Answers carry ``ok``; a refused or failed request answers ``{"ok": false, "error": "..."}``.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from nbtrain.errors import EnvironmentProblem

__all__ = ["MAX_MESSAGE", "MAX_SOCKET_PATH", "AgentUnreachable", "call", "check_socket_path", "read_message",
           "write_message"]

MAX_MESSAGE = 4 * 1024 * 1024
MAX_SOCKET_PATH = 107  # bytes: a Unix socket's sun_path holds 108 on Linux, its terminating NUL included


def check_socket_path(path: Path, home: Path) -> None:
    """Refuse, before anything starts, an agent socket ``path`` longer than a Unix socket path may be (the store at
    ``home``, NBTRAIN_HOME, is too deep): EnvironmentProblem naming NBTRAIN_HOME, its length and the fix."""
    length = len(os.fsencode(path))
    if length <= MAX_SOCKET_PATH:
        return
    fits = MAX_SOCKET_PATH - (length - len(os.fsencode(home)))
    raise EnvironmentProblem(
        f"--warm: a warm gang's agents listen on a Unix socket in the store ({path}, {length} bytes), and a Unix "
        f"socket path may be at most {MAX_SOCKET_PATH} bytes; NBTRAIN_HOME ({home}) is {len(os.fsencode(home))} "
        f"bytes long. Set NBTRAIN_HOME to a directory of at most {max(fits, 1)} bytes (e.g. ~/.nbtrain, the "
        "default) before starting Jupyter, or run the cell without --warm.")


class AgentUnreachable(OSError):
    """The agent did not answer (gone, or not listening yet)."""


def write_message(conn: socket.socket, message: dict[str, Any]) -> None:
    """Send ``message`` as one JSON line."""
    conn.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")


def read_message(conn: socket.socket) -> dict[str, Any]:
    """Read one JSON line (at most :data:`MAX_MESSAGE` bytes); ValueError when it is not a JSON object."""
    data = bytearray()
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_MESSAGE:
            raise ValueError(f"message over {MAX_MESSAGE} bytes")
    value = json.loads(data or b"null")
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def call(path: Path, message: dict[str, Any], *, timeout: float = 10.0) -> dict[str, Any]:
    """Send ``message`` to the agent listening at ``path``; its answer. Raises AgentUnreachable."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(str(path))
            write_message(conn, message)
            return read_message(conn)
    except (OSError, ValueError) as error:
        raise AgentUnreachable(f"the warm-gang agent at {path} did not answer {message.get('op')!r}: {error}") from error
