"""Kueue's Workload read as the one line a queued run shows (pure): Kueue's own reason, the place in line, eviction."""

from __future__ import annotations

from typing import Any

from nbtrain.backends.kubernetes.kueue import Position, pending_position, queue_view

QUOTA = ("couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor "
         "default-flavor, 8 more needed")


def condition(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-12-02T14:00:00Z"}


def workload(*conditions: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "job-train-abc12-1f2e3"}, "status": {"conditions": list(conditions), **status}}


def test_a_pending_workload_shows_kueues_reason_and_its_place_in_line() -> None:
    pending = workload(condition("QuotaReserved", "False", "Pending", QUOTA))
    view = queue_view(pending, queue="team-a", position=Position(3, 7))
    assert view is not None and not view.admitted and not view.evicted
    assert view.detail == f"queued in Kueue (LocalQueue team-a, position 3, 7 in its ClusterQueue): {QUOTA}"
    assert queue_view(pending, queue="team-a").detail == f"queued in Kueue (LocalQueue team-a): {QUOTA}"  # type: ignore[union-attr]


def test_an_inadmissible_workload_says_kueues_reason_too() -> None:
    view = queue_view(workload(condition("QuotaReserved", "False", "Inadmissible", "ClusterQueue cq is inactive")),
                      queue="team-a")
    assert view is not None and view.detail == "queued in Kueue (LocalQueue team-a) [Inadmissible]: ClusterQueue cq is inactive"


def test_a_workload_kueue_has_not_tried_yet_and_one_without_a_workload() -> None:
    assert queue_view(None, queue="team-a") is None  # nothing to add to "waiting for Kueue"
    view = queue_view(workload(), queue="team-a", position=Position(1))
    assert view is not None and view.detail == "queued in Kueue (LocalQueue team-a, position 1): not yet considered for admission"


def test_reserved_quota_waits_for_admission_checks_then_admission() -> None:
    reserved = workload(condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
                        admission={"clusterQueue": "cq"},
                        admissionChecks=[{"name": "dws-prov", "state": "Pending", "message": "waiting for capacity"}])
    view = queue_view(reserved, queue="team-a")
    assert view is not None and view.detail == ("quota reserved by Kueue in ClusterQueue cq; waiting for admission "
                                                "checks: dws-prov Pending: waiting for capacity")
    admitted = workload(condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
                        condition("Admitted", "True", "Admitted", "The workload is admitted"), admission={"clusterQueue": "cq"})
    view = queue_view(admitted, queue="team-a")
    assert view is not None and view.admitted and "admitted by Kueue (ClusterQueue cq)" in view.detail


def test_an_evicted_workload_says_so_with_kueues_reason_and_when_it_is_requeued() -> None:
    evicted = workload(
        condition("QuotaReserved", "False", "Pending", QUOTA),
        condition("Evicted", "True", "Preempted", "Preempted to accommodate a higher priority Workload"),
        condition("Admitted", "False", "NoReservation", "The workload has no reservation"))
    view = queue_view(evicted, queue="team-a")
    assert view is not None and view.evicted == "Preempted: Preempted to accommodate a higher priority Workload"
    assert view.detail.startswith("evicted by Kueue (Preempted: Preempted to accommodate a higher priority Workload); "
                                  "queued again (LocalQueue team-a): ")
    assert view.detail.endswith(QUOTA)
    timed_out = workload(condition("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout ns/w"),
                         condition("QuotaReserved", "False", "Pending", "Workload evicted"),
                         requeueState={"count": 2, "requeueAt": "2026-12-02T14:05:00Z"})
    view = queue_view(timed_out, queue="team-a")
    assert view is not None and "PodsReadyTimeout" in view.detail
    assert "at 2026-12-02T14:05:00Z (requeued 2 times)" in view.detail


def test_the_position_comes_from_the_visibility_summary_1_based() -> None:
    summary = {"items": [
        {"metadata": {"name": "job-other-00000"}, "positionInLocalQueue": 0, "positionInClusterQueue": 4},
        {"metadata": {"name": "job-train-abc12-1f2e3"}, "positionInLocalQueue": 1, "positionInClusterQueue": 5},
    ]}
    assert pending_position(summary, "job-train-abc12-1f2e3") == Position(2, 6)
    assert pending_position(summary, "job-gone-11111") is None
    assert pending_position(None, "x") is None
