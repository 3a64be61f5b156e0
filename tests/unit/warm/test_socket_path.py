"""A store too deep for the agents' Unix socket is refused before a warm gang starts (issue 28): the message names
NBTRAIN_HOME, how long it is, and how long it may be; nothing is left in the store."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbtrain.errors import EnvironmentProblem
from nbtrain.store import Store
from nbtrain.warm import registry
from nbtrain.warm.protocol import MAX_SOCKET_PATH, check_socket_path


def test_a_socket_path_over_the_limit_is_refused_naming_nbtrain_home(tmp_path: Path) -> None:
    home = tmp_path / ("h" * 120)
    with pytest.raises(EnvironmentProblem) as caught:
        check_socket_path(home / "gangs" / "gang-abcdefgh-123456" / "node-0.sock", home)
    message = str(caught.value)
    assert f"NBTRAIN_HOME ({home})" in message and f"at most {MAX_SOCKET_PATH} bytes" in message
    assert "Set NBTRAIN_HOME to a directory of at most" in message and "without --warm" in message
    check_socket_path(Path("/tmp/h/gangs/gang-abcdefgh-123456/node-0.sock"), Path("/tmp/h"))  # fits


def test_acquire_refuses_before_any_agent_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[Path] = []
    monkeypatch.setattr(registry, "_start_agents", lambda gang_dir, nodes, python: started.append(gang_dir))
    store = Store(tmp_path / ("d" * 100))
    with pytest.raises(EnvironmentProblem, match="NBTRAIN_HOME"):
        registry.acquire(store, "k" * 64, {"nodes": 2}, run_id="r-1", ttl_s=60.0, python="python")
    assert started == [] and not any(p.name.startswith("gang-") for p in (store.root / "gangs").iterdir())
