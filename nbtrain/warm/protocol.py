"""The agents' control channel: one JSON request and one JSON answer per connection, over a private Unix socket.

The socket lives in the gang's directory of the (private, 0700) store, so only the store's owner reaches it.
Answers carry ``ok``; a refused or failed request answers ``{"ok": false, "error": "..."}``.

Requests are typed messages (:data:`Message`), one frozen dataclass per ``op``; an agent reads one with
:func:`parse`, which refuses a malformed message (:class:`MessageError`: an unknown ``op``, a missing or unknown
key, a value of the wrong kind) before anything is forked: the channel is a trust boundary.

- :class:`Ping`, :class:`Stop`;
- :class:`Supervise` (node 0): fork the supervisor of a warm attempt;
- :class:`StartStore` (node 0): fork the rendezvous store holder of a generation;
- :class:`ForkRanks`: fork this node's ranks of a generation (the generation-start message);
- :class:`Poll`: the exit codes of a generation's ranks; :class:`End`: end a generation.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

from nbtrain.errors import EnvironmentProblem

__all__ = ["MAX_MESSAGE", "MAX_SOCKET_PATH", "AgentUnreachable", "End", "ForkRanks", "Message", "MessageError",
           "Ping", "Poll", "StartStore", "Stop", "StoreAddress", "Supervise", "call", "check_socket_path", "parse",
           "read_message", "write_message"]

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


def call(path: Path, message: Message, *, timeout: float = 10.0) -> dict[str, Any]:
    """Send ``message`` to the agent listening at ``path``; its answer. Raises AgentUnreachable."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(str(path))
            write_message(conn, message.to_json())
            return read_message(conn)
    except (OSError, ValueError) as error:
        raise AgentUnreachable(f"the warm-gang agent at {path} did not answer {message.op!r}: {error}") from error


# -- the messages -------------------------------------------------------------------------------------------------
class MessageError(ValueError):
    """A control message an agent refuses: what is wrong with it, by key (nothing was done)."""


@dataclass(frozen=True)
class _Message:
    """What every message shares: its ``op`` and its JSON form (``op``, then the fields)."""

    op: ClassVar[str]

    def to_json(self) -> dict[str, Any]:
        """This message as the JSON object sent on the channel (what :func:`parse` reads back)."""
        return {"op": self.op, **{f.name: _json(getattr(self, f.name)) for f in fields(self)}}


@dataclass(frozen=True)
class Ping(_Message):
    """``ping``: is the agent there (its pid, node and running generations)."""

    op: ClassVar[str] = "ping"


@dataclass(frozen=True)
class Stop(_Message):
    """``stop``: end the agent (and everything it forked)."""

    op: ClassVar[str] = "stop"


@dataclass(frozen=True)
class Supervise(_Message):
    """``supervise`` (node 0): fork the supervisor of the warm attempt in ``attempt_dir`` with exactly ``env``, in
    ``cwd``, its output appended to ``log``."""

    op: ClassVar[str] = "supervise"
    attempt_dir: str
    env: Mapping[str, str]
    cwd: str
    log: str


@dataclass(frozen=True)
class StartStore(_Message):
    """``store`` (node 0): fork the rendezvous store holder of ``generation`` on ``host``; ``supervisor``: the
    identity of the run's supervisor (the generation ends when it is gone)."""

    op: ClassVar[str] = "store"
    generation: int
    host: str = "127.0.0.1"
    supervisor: str = ""


@dataclass(frozen=True)
class StoreAddress:
    """Where a generation's rendezvous store listens."""

    addr: str
    port: int

    def to_json(self) -> dict[str, Any]:
        """This address as a JSON object."""
        return {"addr": self.addr, "port": self.port}


@dataclass(frozen=True)
class ForkRanks(_Message):
    """``fork``: fork this node's ``ranks`` of ``generation`` (the generation-start message).

    Each rank gets ``env`` (the launcher's environment over the supervisor's) with what ``accelerate launch``
    would add for ``argv`` (:func:`nbtrain.warm.rankenv.accelerate_env`), joins the generation's ``store``, and runs
    the bundle in ``bundle_dir`` from ``cwd``; every process is marked with ``run_id``.
    """

    op: ClassVar[str] = "fork"
    generation: int
    run_id: str
    ranks: tuple[int, ...]
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    bundle_dir: str
    store: StoreAddress


@dataclass(frozen=True)
class Poll(_Message):
    """``poll``: the exit codes of ``generation``'s ranks on this node."""

    op: ClassVar[str] = "poll"
    generation: int


@dataclass(frozen=True)
class End(_Message):
    """``end``: end ``generation`` on this node (SIGTERM, SIGKILL after ``grace_s``)."""

    op: ClassVar[str] = "end"
    generation: int
    grace_s: float = 3.0


#: Every request an agent answers.
Message = Ping | Stop | Supervise | StartStore | ForkRanks | Poll | End
_TYPES: dict[str, type[Message]] = {t.op: t for t in (Ping, Stop, Supervise, StartStore, ForkRanks, Poll, End)}


def parse(data: Mapping[str, Any]) -> Message:
    """The typed message of ``data`` (a JSON object read from the channel); MessageError when it is malformed."""
    op = data.get("op")
    kind = _TYPES.get(op) if isinstance(op, str) else None
    if kind is None or not isinstance(op, str):
        raise MessageError(f"unknown op {op!r}; an agent answers {', '.join(sorted(_TYPES))}")
    known = {f.name: f for f in fields(kind)}
    unknown = sorted(set(data) - set(known) - {"op"})
    if unknown:
        raise MessageError(f"{op!r}: unknown key(s) {', '.join(map(repr, unknown))} (an agent of another nbtrain?)")
    values: dict[str, Any] = {}
    for name, f in known.items():
        if name in data:
            values[name] = _checked(op, name, data[name])
        elif f.default is MISSING:
            raise MessageError(f"{op!r}: missing key {name!r}")
    return kind(**values)


def _json(value: Any) -> Any:
    if isinstance(value, StoreAddress):
        return value.to_json()
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


def _checked(op: str, name: str, value: Any) -> Any:
    """``value`` of key ``name`` as its field's type; MessageError naming the key and what it must be."""
    check, must = _CHECKS[name]
    try:
        return check(value)
    except (TypeError, ValueError):
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:80] + "..."
        raise MessageError(f"{op!r}: {name!r} must be {must}, not {shown}") from None


def _int(value: Any, low: int = 0, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        raise ValueError(value)
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(value)
    return value


def _strs(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise TypeError(value)
    return tuple(_str(v) for v in value)


def _ints(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise TypeError(value)
    return tuple(_int(v) for v in value)


def _env(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise TypeError(value)
    return {_str(k): _str(v) for k, v in value.items()}


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
        raise ValueError(value)
    return float(value)


def _store(value: Any) -> StoreAddress:
    if not isinstance(value, dict) or set(value) != {"addr", "port"}:
        raise TypeError(value)
    return StoreAddress(addr=_str(value["addr"]), port=_int(value["port"], 1, 65535))


#: Each message key: how its value is checked, and what it must be (for the error).
_CHECKS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "generation": (_int, "a non-negative integer"), "grace_s": (_seconds, "a non-negative number of seconds"),
    "host": (_str, "a string"), "supervisor": (_str, "a string"), "run_id": (_str, "a string"),
    "cwd": (_str, "a string"), "bundle_dir": (_str, "a string"), "attempt_dir": (_str, "a string"),
    "log": (_str, "a string"), "env": (_env, "an object of string values"),
    "argv": (_strs, "a non-empty list of strings"), "ranks": (_ints, "a non-empty list of non-negative integers"),
    "store": (_store, 'an object {"addr": string, "port": integer 1-65535}'),
}
