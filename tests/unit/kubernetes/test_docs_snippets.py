"""The platform guide's YAML in docs/kubernetes.md parses, and the training operator's init-container template it
gives, rendered as the operator renders it, passes the restricted checks in a pod with nbtrain's pod security."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml
from test_manifests import k8s_versions
from test_openshift import restricted_violations

DOCS = Path(__file__).resolve().parents[3] / "docs" / "kubernetes.md"


def _yaml_blocks() -> list[Any]:
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), re.S)]


def _block(predicate: Any) -> Any:
    (found,) = [b for b in _yaml_blocks() if isinstance(b, dict) and predicate(b)]
    return found


def test_the_pytorch_init_container_template_is_restricted_in_nbtrains_pods() -> None:
    configmap = _block(lambda b: b.get("kind") == "ConfigMap" and "initContainer.yaml" in b.get("data", {}))
    rendered = (configmap["data"]["initContainer.yaml"].replace("{{.InitContainerImage}}", "alpine:3.10")
                .replace("{{.MaxTries}}", "100").replace("{{.MasterAddr}}", "digits-3fa9c2-master-0"))
    (init,) = yaml.safe_load(rendered)
    assert init["name"] == "init-pytorch" and "runAsUser" not in init["securityContext"]
    pod = {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                               "seccompProfile": {"type": "RuntimeDefault"}},
           "initContainers": [init], "containers": [{**init, "name": "node"}]}
    assert restricted_violations(pod) == []
    for version in (k8s_versions()[0], k8s_versions()[-1]):
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w"}, "spec": pod},
                                     version, strict=True)


def test_the_local_queue_and_the_wait_for_pods_ready_snippets_use_kueues_field_names() -> None:
    queue = _block(lambda b: b.get("kind") == "LocalQueue")
    assert queue["apiVersion"] == "kueue.x-k8s.io/v1beta1" and queue["spec"] == {"clusterQueue": "cluster-queue"}
    wait = _block(lambda b: "waitForPodsReady" in b)["waitForPodsReady"]
    assert set(wait) == {"enable", "timeout", "blockAdmission", "requeuingStrategy"} and wait["enable"] is True
    assert set(wait["requeuingStrategy"]) <= {"timestamp", "backoffLimitCount", "backoffBaseSeconds", "backoffMaxSeconds"}
