"""``nbtrain.log``: the mapping form (wandb.log / accelerator.log / mlflow.log_metrics) and the keyword form
report the same METRIC events; a call in neither form fails with nbtrain's message naming both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import nbtrain
from nbtrain.events import EventKind, EventWriter, read_events
from nbtrain.runtime import context


@pytest.fixture()
def events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A rank context writing to a file; returns that file."""
    path = tmp_path / "rank-0.jsonl"
    ctx = context.WorkerContext(run_id="r", attempt=0, rank=0, local_rank=0, world_size=1, node_rank=0,
                                events=EventWriter(path, "rank-0", attempt=0, rank=0), result_path=None)
    monkeypatch.setattr(context, "_current", ctx)
    return path


def _metrics(path: Path) -> list[tuple[int, dict[str, float]]]:
    return [(e.data["step"], e.data["values"]) for e in read_events(path) if e.kind is EventKind.METRIC]


def test_mapping_and_keyword_forms_report_the_same_points(events: Path) -> None:
    nbtrain.log({"loss": 1.0}, step=3)
    nbtrain.log({"loss": 0.5}, 4)  # wandb.log(data, step) passes the step positionally
    nbtrain.log(step=5, loss=0.25)
    nbtrain.log({"loss": 0.125}, step=6, acc=0.9)  # both: merged
    nbtrain.log({"values": 2.0, "step_time": 0.1}, step=7)  # metric names that look like parameters
    assert _metrics(events) == [(3, {"loss": 1.0}), (4, {"loss": 0.5}), (5, {"loss": 0.25}),
                                (6, {"loss": 0.125, "acc": 0.9}), (7, {"values": 2.0, "step_time": 0.1})]


@pytest.mark.parametrize("call", [
    lambda: nbtrain.log(3, loss=1.0),  # step first, positionally
    lambda: nbtrain.log(0.5),  # a bare number
    lambda: nbtrain.log([("loss", 1.0)], step=1),  # pairs, not a mapping
    lambda: nbtrain.log({"loss": 1.0}, step="three"),
    lambda: nbtrain.log({"loss": 1.0}, step=1.5),
    lambda: nbtrain.log({"loss": 1.0}, step=1, loss=2.0),  # a key twice
])
def test_a_wrong_call_names_both_forms_inside_and_outside_a_run(call: Any, events: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    for ctx in (context._current, None):
        monkeypatch.setattr(context, "_current", ctx)
        with pytest.raises(TypeError) as error:
            call()
        message = str(error.value)
        assert message.startswith("nbtrain.log()")
        assert 'nbtrain.log({"loss": 0.5}, step=3)' in message and "nbtrain.log(step=3, loss=0.5)" in message
    assert _metrics(events) == []


@pytest.mark.parametrize("step", [2**63, -(2**63) - 1, 10**30])
def test_a_step_outside_64_bits_is_refused_with_nbtrains_message(step: int, events: Path) -> None:
    """Issue 28: such a step would break MLflow and the run's charts for good; refused where it is logged."""
    with pytest.raises(ValueError, match=rf"nbtrain.log\(\) step {step} is outside the steps MLflow and nbtrain's "
                                         r"charts store \(64-bit"):
        nbtrain.log({"loss": 1.0}, step=step)
    nbtrain.log({"loss": 1.0}, step=2**63 - 1)  # the largest step that fits is fine
    assert _metrics(events) == [(2**63 - 1, {"loss": 1.0})]
