"""How each flavor's owner ends: a run past --timeout reads "exceeded --timeout" whatever the owner (the objects below are
shaped as the controllers write them; sources in podstate.py), other failures do not, and what the owners do with the
pods of a finished workload (PyTorchJob cleanPodPolicy Running, against the vendored CRD)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jsonschema
import pytest
from k8s_unit_helpers import crd_schema
from test_manifests import full_spec

from nbtrain.backends.base import Plan
from nbtrain.backends.kubernetes.manifests import JOBSET_DEADLINE_RULE
from nbtrain.backends.kubernetes.podstate import OwnerState, first_failure, owner_state
from nbtrain.model import RunState

MakePlan = Callable[..., Plan]
JOBSET_SPEC = {"failurePolicy": {"maxRestarts": 0, "rules": [dict(JOBSET_DEADLINE_RULE)]}}


def failed(conditions: list[dict[str, str]], spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"spec": spec or {}, "status": {"conditions": [{"status": "True", **c} for c in conditions]}}


# Each flavor's "ran past activeDeadlineSeconds", as its controller writes it.
DEADLINES = {
    # kube-controller-manager's Job controller (batchv1.JobReasonDeadlineExceeded)
    "job": failed([
        {"type": "FailureTarget", "reason": "DeadlineExceeded", "message": "Job was active longer than specified deadline"},
        {"type": "Failed", "reason": "DeadlineExceeded", "message": "Job was active longer than specified deadline"},
    ]),
    # training-operator release-1.9, pkg/controller.v1/common/job.go: NewReason("PyTorchJob", "Failed")
    "pytorchjob": failed([
        {"type": "Created", "reason": "PyTorchJobCreated", "message": "PyTorchJob digits-3fa9c2-a0 is created."},
        {"type": "Failed", "reason": "PyTorchJobFailed",
         "message": "Job digits-3fa9c2-a0 has failed because it was active longer than specified deadline"},
    ]),
    # jobset pkg/controllers/failure_policy.go, failJobSetActionApplier (the rule nbtrain's JobSets carry)
    "jobset": failed([{"type": "Failed", "reason": "FailJobSetFailurePolicyAction",
                       "message": "applying FailJobSet failure policy action (first failed job: digits-3fa9c2-a0-workers-0)"}],
                     JOBSET_SPEC),
}
# The same owners failing for another reason: not a deadline.
OTHER_FAILURES = {
    "job": failed([{"type": "Failed", "reason": "PodFailurePolicy",
                    "message": "Container trainer for pod ns/x-0-abcde failed with exit code 1 matching FailJob rule at index 0"}]),
    "pytorchjob": failed([{"type": "Failed", "reason": "PyTorchJobFailed",
                           "message": "PyTorchJob digits-3fa9c2-a0 is failed because 1 Master replica(s) failed."}]),
    "jobset": failed([{"type": "Failed", "reason": "ReachedMaxRestarts",
                       "message": "jobset failed due to reaching max number of restarts (first failed job: x-workers-0)"}],
                     JOBSET_SPEC),
}


def verdict(owner: OwnerState, timeout_s: float | None = 90) -> str:
    return first_failure(rank_errors={}, pods=[], elastic_codes={}, procs=2, last_lines={}, owner=owner,
                         timeout_s=timeout_s).reason


@pytest.mark.parametrize("flavor", sorted(DEADLINES))
def test_a_run_past_its_deadline_reads_exceeded_timeout_with_the_value_for_every_flavor(flavor: str) -> None:
    owner = owner_state(DEADLINES[flavor], flavor)
    assert owner.outcome is RunState.FAILED and owner.deadline
    reason = verdict(owner)
    assert "exceeded --timeout 90 s" in reason and "activeDeadlineSeconds" in reason
    assert "exceeded --timeout 2.5 s" in verdict(owner, 2.5)
    assert "exceeded --timeout" in verdict(owner, None)  # no value known (an old attempt's record): still said so


@pytest.mark.parametrize("flavor", sorted(OTHER_FAILURES))
def test_other_failures_of_the_owner_are_not_read_as_a_deadline(flavor: str) -> None:
    owner = owner_state(OTHER_FAILURES[flavor], flavor)
    assert owner.outcome is RunState.FAILED and not owner.deadline
    assert "timeout" not in verdict(owner)


def test_a_jobset_fail_rule_means_the_deadline_only_when_every_fail_rule_is_on_deadlines_alone() -> None:
    condition = DEADLINES["jobset"]["status"]["conditions"]
    other_rule = {"failurePolicy": {"rules": [dict(JOBSET_DEADLINE_RULE),
                                              {"name": "oom", "action": "FailJobSet", "onJobFailureReasons": []}]}}
    for spec in ({}, other_rule):  # a JobSet nbtrain did not build this way
        assert not owner_state({"spec": spec, "status": {"conditions": condition}}, "jobset").deadline


@pytest.mark.parametrize("flavor", sorted(DEADLINES))
def test_the_deadline_is_read_from_the_owner_not_the_pods(make_plan: MakePlan, flavor: str) -> None:
    """The owners' own deadline fields: the Job's (also each JobSet Job's) and the PyTorchJob's runPolicy."""
    workload = make_plan(flavor=flavor, **full_spec(timeout_s=90)).request.objects[0]
    spec = workload["spec"]
    deadline = {"job": lambda: spec["activeDeadlineSeconds"], "pytorchjob": lambda: spec["runPolicy"]["activeDeadlineSeconds"],
                "jobset": lambda: spec["replicatedJobs"][0]["template"]["spec"]["activeDeadlineSeconds"]}[flavor]()
    assert deadline == 90
    if flavor == "jobset":
        assert spec["failurePolicy"] == {"maxRestarts": 0, "rules": [
            {"name": "nbtrainTimeout", "action": "FailJobSet", "onJobFailureReasons": ["DeadlineExceeded"]}]}
        assert owner_state(failed(DEADLINES["jobset"]["status"]["conditions"], spec), "jobset").deadline


def test_pytorchjob_cleans_running_pods_and_keeps_finished_ones(make_plan: MakePlan) -> None:
    workload = make_plan(flavor="pytorchjob", **full_spec()).request.objects[0]
    assert workload["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"
    # the CRD states no enum: these are the operator's values (pkg/apis/kubeflow.org/v1/common_types.go)
    assert workload["spec"]["runPolicy"]["cleanPodPolicy"] in ("All", "Running", "None")
    jsonschema.validate(workload, crd_schema("pytorchjobs.yaml", "v1"))


def test_jobset_rule_validates_against_the_jobset_crd(make_plan: MakePlan) -> None:
    workload = make_plan(flavor="jobset", **full_spec()).request.objects[0]
    jsonschema.validate(workload, crd_schema("jobsets.yaml", "v1alpha2"))
    broken = {**workload, "spec": {**workload["spec"], "failurePolicy": {"maxRestarts": 0, "rules": [
        {"name": "nbtrainTimeout", "action": "FailTheWholeThing", "onJobFailureReasons": ["DeadlineExceeded"]}]}}}
    with pytest.raises(jsonschema.ValidationError):  # the schema does check the rule's action
        jsonschema.validate(broken, crd_schema("jobsets.yaml", "v1alpha2"))
