"""Platform knobs on Kubernetes (--image-pull-secret, --priority-class, --shm-size, --label, --annotation): in every
flavor's manifests, refused by the other backends, and each value the API server would refuse (or a key nbtrain sets
itself) refused before anything is created, naming the value and the fix."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from k8s_unit_helpers import pod_specs, walk

from nbtrain.backends.base import Plan
from nbtrain.errors import SpecError
from nbtrain.flags import build_parser, spec_from_namespace, unsupported_options
from nbtrain.spec import JobSpec

MakePlan = Callable[..., Plan]
FLAVORS = ("job", "pytorchjob", "jobset")
KNOBS: dict[str, Any] = dict(image_pull_secrets=("registry-creds", "mirror-creds"), priority_class="high-priority",
                             shm_size="16Gi", labels={"cost-center": "ml-42"},
                             annotations={"sidecar.istio.io/inject": "false"})


def _pod_templates(workload: dict[str, Any]) -> list[dict[str, Any]]:
    return [value for path, value in walk(workload) if path.endswith("template") and "containers" in
            (value.get("spec") or {})]


@pytest.mark.parametrize("flavor", FLAVORS)
def test_every_flavor_carries_every_knob_on_its_pods_and_objects(make_plan: MakePlan, flavor: str) -> None:
    objects = make_plan(flavor=flavor, nodes=2, **KNOBS).request.objects
    pods = list(pod_specs(objects[0]))
    assert pods
    for pod in pods:
        assert pod["imagePullSecrets"] == [{"name": "registry-creds"}, {"name": "mirror-creds"}]
        assert pod["priorityClassName"] == "high-priority"
        assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["volumes"]
    for template in _pod_templates(objects[0]):
        assert template["metadata"]["labels"]["cost-center"] == "ml-42"
        assert template["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
        assert template["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "nbtrain"
    for obj in objects:
        assert obj["metadata"]["labels"]["cost-center"] == "ml-42", obj["kind"]
        assert obj["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false", obj["kind"]


def test_without_knobs_the_pods_have_none_of_them(make_plan: MakePlan) -> None:
    for pod in pod_specs(make_plan().request.objects[0]):
        assert "imagePullSecrets" not in pod and "priorityClassName" not in pod
        assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in pod["volumes"]


@pytest.mark.parametrize("backend", ["local", "slurm"])
def test_other_backends_refuse_every_knob(backend: str) -> None:
    messages = unsupported_options(JobSpec(**KNOBS), backend)
    assert [m.split()[0] for m in messages] == ["--image-pull-secret", "--priority-class", "--shm-size", "--label",
                                                "--annotation"], messages
    assert all("is a Kubernetes option" in m for m in messages)


def test_knobs_reach_their_fields_from_the_flags() -> None:
    ns = build_parser("magic").parse_args([
        "--image-pull-secret", "registry-creds", "--image-pull-secret", "mirror-creds", "--priority-class",
        "high-priority", "--shm-size", "16Gi", "--label", "cost-center=ml-42",
        "--annotation", "sidecar.istio.io/inject=false"])
    spec = spec_from_namespace(ns, JobSpec(backend="kubernetes"))
    assert spec == JobSpec(backend="kubernetes", **KNOBS)


@pytest.mark.parametrize(("fields", "message"), [
    ({"image_pull_secrets": ("Registry_Creds",)}, "--image-pull-secret 'Registry_Creds': not a Secret name"),
    ({"priority_class": "High Priority"}, "--priority-class 'High Priority': not a PriorityClass name"),
    ({"shm_size": "16 GB"}, "--shm-size '16 GB': not a Kubernetes quantity; write e.g. --shm-size 16Gi"),
    ({"labels": {"bad key!": "x"}}, "--label bad key!=x: 'bad key!' is not a valid key"),
    ({"labels": {"team": "has space"}}, "--label team=has space: a label value is at most 63"),
    ({"labels": {"team": "x" * 64}}, "a label value is at most 63"),
    ({"labels": {"nbtrain.dev/run-id": "mine"}}, "--label nbtrain.dev/run-id=mine: nbtrain (or Kueue, through "
                                                 "--queue) sets nbtrain.dev/run-id itself"),
    ({"labels": {"app.kubernetes.io/managed-by": "me"}}, "sets app.kubernetes.io/managed-by itself"),
    ({"labels": {"kueue.x-k8s.io/queue-name": "q"}}, "sets kueue.x-k8s.io/queue-name itself"),
    ({"annotations": {"-bad": "x"}}, "--annotation -bad=x: '-bad' is not a valid key"),
    ({"annotations": {"nbtrain.dev/bundle-digest": "x"}}, "sets nbtrain.dev/bundle-digest itself"),
])
def test_each_value_the_api_would_refuse_is_a_spec_error(make_plan: MakePlan, fields: dict[str, Any],
                                                         message: str) -> None:
    with pytest.raises(SpecError, match=re.escape(message)):
        make_plan(**fields)
