"""The core contract: Plan[R] renders a typed request and a mapping alike; base.py re-exports the names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from nbtrain.backends import base
from nbtrain.contract import Plan, Request, RunHandle, describe_request, request_json
from nbtrain.spec import JobSpec


@dataclass(frozen=True)
class _Request:
    describe: str
    n: int

    def to_json(self) -> dict[str, Any]:
        return {"describe": self.describe, "n": self.n}


def test_a_typed_request_and_a_mapping_render_the_same() -> None:
    typed = Plan("local", "r-1", JobSpec(), "d" * 64, "/b", _Request("node 0: accelerate launch", 1))
    mapped = Plan("local", "r-1", JobSpec(), "d" * 64, "/b", {"describe": "node 0: accelerate launch"})
    assert typed.render() == mapped.render()
    assert typed.render().endswith("node 0: accelerate launch")
    assert isinstance(typed.request, Request)
    assert request_json(typed.request) == {"describe": "node 0: accelerate launch", "n": 1}
    assert describe_request({"x": 1}) is None
    with pytest.raises(TypeError, match="Request or a mapping"):
        request_json(3)


def test_base_reexports_the_contract() -> None:
    assert base.Plan is Plan and base.RunHandle is RunHandle
    assert RunHandle("local", "r", {"attempt": 2}).attempt == 2
