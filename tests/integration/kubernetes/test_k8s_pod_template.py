"""--pod-template on the fake cluster: what the file adds reaches the pods that really run (the fake kubelet starts
each pod's container with the env of its spec), and nbtrain's own launch is untouched by it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_cluster import NAMESPACE, FakeCluster

from nbtrain.bundle import capture_cell
from nbtrain.client import submit_bundle
from nbtrain.model import RunState
from nbtrain.spec import JobSpec

pytestmark = pytest.mark.slow


def test_an_env_var_from_the_pod_template_reaches_every_rank(cluster: FakeCluster, k8s_backend: Any,
                                                             tmp_path: Path) -> None:
    template = tmp_path / "pod-template.yaml"
    template.write_text(yaml.safe_dump({
        "metadata": {"labels": {"example.com/team": "vision"}},
        "spec": {"containers": [{"name": "trainer", "env": [{"name": "FROM_TEMPLATE", "value": "platform-says-hi"}]}]},
    }))
    code = ("import os\nfrom accelerate import PartialState\nstate = PartialState()\n"
            "print('template env:', os.environ.get('FROM_TEMPLATE'), flush=True)\nos.environ['FROM_TEMPLATE']\n")
    bundle = capture_cell(code, {"__name__": "__main__"})
    spec = JobSpec(name="template", nodes=2, procs_per_node=1, backend="kubernetes", device="cpu",
                   pod_template=str(template))
    run = submit_bundle(bundle, spec, store=k8s_backend.store, backend=k8s_backend)
    assert run.wait(timeout=120) is RunState.SUCCEEDED
    assert run.result() == "platform-says-hi"
    for rank in (0, 1):
        assert "template env: platform-says-hi" in run.logs(rank), run.logs(rank)
    pods = cluster.pods(NAMESPACE)
    assert len(pods) == 2
    for pod in pods:
        assert pod["metadata"]["labels"]["example.com/team"] == "vision"
        assert {"name": "FROM_TEMPLATE", "value": "platform-says-hi"} in pod["spec"]["containers"][0]["env"]
