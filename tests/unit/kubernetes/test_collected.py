"""A workload collected before nbtrain saw it end: the store's mirrored events decide, never the absence."""

from __future__ import annotations

from nbtrain.backends.kubernetes.podstate import collected_outcome
from nbtrain.model import RunState


def test_every_rank_done_in_the_store_is_a_success() -> None:
    state, reason = collected_outcome(kind="Job", name="digits-3fa9c2", ttl_s=3600, ranks_done=4, world=4)
    assert state is RunState.SUCCEEDED and "every rank reported done" in reason


def test_otherwise_the_outcome_is_unknown_naming_the_ttl_and_the_fix() -> None:
    state, reason = collected_outcome(kind="Job", name="digits-3fa9c2", ttl_s=3600, ranks_done=3, world=4)
    assert state is RunState.FAILED
    assert reason.startswith("the outcome is unknown: the Job digits-3fa9c2 was collected (its ttlSecondsAfterFinished, "
                             "3600 s)")
    assert "only 3 of 4 ranks had reported done" in reason and "NBTRAIN_K8S_TTL" in reason
    _, unknown_ttl = collected_outcome(kind="TrainJob", name="t", ttl_s=None, ranks_done=0, world=2)
    assert "was collected (its TTL)" in unknown_ttl
