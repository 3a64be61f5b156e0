"""A warm run's cooperative Stop (nbtrain.runtime.stopping): the ranks agree, through a store, on the step to stop at."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nbtrain.runtime import stopping


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A generation's store (as a warm gang's agent holds it) and this process as a warm rank of it."""
    from torch.distributed import TCPStore

    master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=5))
    monkeypatch.setenv(stopping.ENV_COOPERATIVE_STOP, f"127.0.0.1:{master.port}")
    monkeypatch.setattr(stopping, "_store", None)
    monkeypatch.setattr(stopping, "_stop_step", None)
    monkeypatch.setattr(stopping, "_disabled", False)
    return master


def test_a_rank_stops_after_the_step_after_the_one_where_it_first_saw_the_stop(store) -> None:  # type: ignore[no-untyped-def]
    stopping.at_step(0)  # nothing asked: training goes on
    stopping.at_step(1)
    store.set(stopping.STOP_KEY, "1")
    stopping.at_step(2)  # proposes step 3: a peer one boundary ahead has not passed it
    assert store.get(stopping.STEP_KEY) == b"3"
    with pytest.raises(stopping.StopAtStep) as stop:
        stopping.at_step(3)
    assert stop.value.code == 0 and stop.value.step == 3


def test_the_first_proposal_wins(store) -> None:  # type: ignore[no-untyped-def]
    store.set(stopping.STOP_KEY, "1")
    store.set(stopping.STEP_KEY, "7")  # a peer saw the Stop first
    stopping.at_step(6)
    with pytest.raises(stopping.StopAtStep):
        stopping.at_step(7)


def test_a_cold_rank_never_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(stopping.ENV_COOPERATIVE_STOP, raising=False)
    stopping.at_step(10**6)


@pytest.mark.parametrize(("value", "grace"), [(None, 5.0), ("2.5", 2.5), ("0", 0.0), ("-3", 0.0), ("99", 10.0),
                                              ("inf", 10.0), ("nan", 5.0), ("soon", 5.0)])
def test_the_stop_grace_is_read_from_the_environment_within_bounds(monkeypatch: pytest.MonkeyPatch, value: str | None,
                                                                   grace: float) -> None:
    from nbtrain.warm.supervisor import ENV_STOP_GRACE_S, stop_grace_s

    if value is None:
        monkeypatch.delenv(ENV_STOP_GRACE_S, raising=False)
    else:
        monkeypatch.setenv(ENV_STOP_GRACE_S, value)
    assert stop_grace_s() == grace
