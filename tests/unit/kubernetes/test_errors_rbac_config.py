"""API errors become clear nbtrain errors; the shipped Role is minimal and valid; NBTRAIN_K8S_* parsing."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import pytest

from nbtrain.backends.kubernetes import KubeOptions, rbac_manifests
from nbtrain.backends.kubernetes.api import kubeconfig_namespace
from nbtrain.backends.kubernetes.errors import RBAC_PATH, api_error
from nbtrain.errors import BackendError, SpecError


def status(code: int, reason: str, message: str) -> str:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
                       "message": message})


def test_403_names_the_verb_resource_namespace_and_the_shipped_role() -> None:
    body = status(403, "Forbidden", 'jobs.batch is forbidden: User "system:serviceaccount:ml:nb" cannot create resource '
                  '"jobs" in API group "batch" in the namespace "ml"')
    error = api_error(403, body, verb="create", resource="jobs.batch", namespace="ml", name="digits-1")
    assert isinstance(error, BackendError)
    text = str(error)
    assert "403 Forbidden" in text and "'create' verb on 'jobs.batch'" in text and "namespace 'ml'" in text
    assert 'User "system:serviceaccount:ml:nb"' in text and RBAC_PATH in text and Path(RBAC_PATH).is_file()


def test_quota_and_admission_denials_are_quoted_verbatim() -> None:
    quota = 'pods "x" is forbidden: exceeded quota: gpu-quota, requested: nvidia.com/gpu=8, used: 0, limited: 4'
    assert quota in str(api_error(403, status(403, "Forbidden", quota), verb="create", resource="jobs.batch", namespace="ml"))
    webhook = 'admission webhook "validate.kyverno.svc" denied the request: images must come from our registry'
    text = str(api_error(400, status(400, "BadRequest", webhook), verb="create", resource="jobs.batch", namespace="ml"))
    assert webhook in text and "refused" in text


def test_404_409_422_401() -> None:
    missing_ns = api_error(404, status(404, "NotFound", 'namespaces "ml" not found'), verb="create",
                           resource="jobs.batch", namespace="ml")
    assert isinstance(missing_ns, SpecError) and "kubectl create namespace ml" in str(missing_ns)
    crd = api_error(404, status(404, "NotFound", "the server could not find the requested resource"), verb="create",
                    resource="pytorchjobs.kubeflow.org", namespace="ml", crd="pytorchjobs.kubeflow.org",
                    install="the Kubeflow Training Operator v1")
    assert "no pytorchjobs.kubeflow.org CustomResourceDefinition" in str(crd) and "Training Operator" in str(crd)
    assert "--flavor job" in str(crd)
    conflict = api_error(409, status(409, "AlreadyExists", 'jobs.batch "digits-1" already exists'), verb="create",
                         resource="jobs.batch", namespace="ml", name="digits-1")
    assert "already exists" in str(conflict) and "kubectl delete jobs.batch digits-1 -n ml" in str(conflict)
    invalid = api_error(422, status(422, "Invalid", 'Job.batch "x" is invalid: spec.completions: Invalid value: 0'),
                        verb="create", resource="jobs.batch", namespace="ml", name="x")
    assert isinstance(invalid, SpecError) and "spec.completions: Invalid value: 0" in str(invalid)
    unauthorized = api_error(401, "Unauthorized", verb="list", resource="pods", namespace="ml", server="https://k8s:6443")
    assert "401" in str(unauthorized) and "https://k8s:6443" in str(unauthorized) and "KUBECONFIG" in str(unauthorized)


def test_rbac_is_a_valid_minimal_namespaced_role() -> None:
    role, binding = rbac_manifests("ml", "notebook")
    for version in ("1.30.0", kubernetes_validate.latest_version() + ".0"):
        kubernetes_validate.validate(role, version, strict=True)
        kubernetes_validate.validate(binding, version, strict=True)
    assert role["kind"] == "Role" and binding["kind"] == "RoleBinding"  # namespaced, not cluster-wide
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "ml"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "notebook", "namespace": "ml"}]
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    resources = {r for _, r, _ in granted}
    assert "pods/exec" not in resources and "*" not in resources
    # Secrets: only to create each attempt's event-key Secret and read it back (attach); never list/watch them all
    assert {v for _, r, v in granted if r == "secrets"} == {"create", "get"}
    assert not any(v in ("*", "update", "patch", "escalate", "bind", "impersonate") for _, _, v in granted)
    for needed in [("batch", "jobs", "create"), ("batch", "jobs", "delete"), ("batch", "jobs", "watch"),
                   ("", "pods", "watch"), ("", "pods/log", "get"), ("", "configmaps", "create"),
                   ("", "secrets", "create"), ("", "secrets", "get"),
                   ("", "services", "create"), ("", "events", "list"), ("kubeflow.org", "pytorchjobs", "create"),
                   ("jobset.x-k8s.io", "jobsets", "create"), ("kueue.x-k8s.io", "localqueues", "get"),
                   ("kueue.x-k8s.io", "localqueues", "list"), ("kueue.x-k8s.io", "workloads", "list"),
                   ("visibility.kueue.x-k8s.io", "localqueues/pendingworkloads", "get")]:
        assert needed in granted, needed


def test_options_from_the_environment() -> None:
    options = KubeOptions.from_env({"NBTRAIN_K8S_IMAGE": "img:2", "NBTRAIN_K8S_DEVICE": "CPU", "NBTRAIN_K8S_PORT": "2222",
                                    "NBTRAIN_K8S_TTL": "60", "NBTRAIN_K8S_LOG_STREAMS": "3"})
    assert (options.image, options.device, options.port, options.ttl_s, options.log_streams) == ("img:2", "cpu", 2222, 60, 3)
    with pytest.raises(SpecError, match="NBTRAIN_K8S_PORT"):
        KubeOptions.from_env({"NBTRAIN_K8S_PORT": "http"})
    with pytest.raises(SpecError, match="NBTRAIN_K8S_DEVICE"):
        KubeOptions.from_env({"NBTRAIN_K8S_DEVICE": "tpu"})
    with pytest.raises(SpecError, match="non-root"):
        KubeOptions(run_as_user=0)


def test_namespace_from_the_kubeconfig_context(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("apiVersion: v1\ncurrent-context: a\ncontexts:\n- name: a\n  context: {namespace: team-a}\n"
                      "- name: b\n  context: {namespace: team-b}\n")
    assert kubeconfig_namespace(KubeOptions(kubeconfig=str(config))) == "team-a"
    assert kubeconfig_namespace(KubeOptions(kubeconfig=str(config), context="b")) == "team-b"
