"""Opt-in: the Kubernetes backend against a REAL cluster (skipped unless NBTRAIN_TEST_KUBECONFIG is set).

Environment:

- ``NBTRAIN_TEST_KUBECONFIG``  kubeconfig of the test cluster (required; its context's namespace is used,
  or ``NBTRAIN_TEST_NAMESPACE``). The identity needs the Role in nbtrain/backends/kubernetes/rbac.yaml.
- ``NBTRAIN_TEST_IMAGE``       the pods' image, built from docker/Dockerfile (required: without it the suite is
  skipped with the build command; stock images such as ``pytorch/pytorch`` lack Accelerate).
- ``NBTRAIN_TEST_DEVICE``      ``cpu`` (default) or ``gpu``.

The same scenarios as the fake API server's tests, plus a server-side dry run with strict field
validation of every flavor whose CRD the cluster has (the API server then checks what no schema file
does: CEL rules, defaults, admission).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nbtrain.errors import NbtrainError, RunFailedError
from nbtrain.model import RunState

KUBECONFIG = os.environ.get("NBTRAIN_TEST_KUBECONFIG")
REASON = "set NBTRAIN_TEST_KUBECONFIG to a kubeconfig of a test cluster to run the real-cluster suite"

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not KUBECONFIG, reason=REASON)]

IMAGE = os.environ.get("NBTRAIN_TEST_IMAGE")
IMAGE_REASON = (
    "set NBTRAIN_TEST_IMAGE to an image built from docker/Dockerfile (stock pytorch/pytorch images lack Accelerate): "
    "docker build -t nbtrain-pod:dev -f docker/Dockerfile docker, then make the cluster see it "
    "(kind load docker-image nbtrain-pod:dev, or minikube image load nbtrain-pod:dev, or push it to a registry) "
    "and export NBTRAIN_TEST_IMAGE=nbtrain-pod:dev"
)


@pytest.fixture
def real(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A KubernetesBackend pointed at the real cluster (mirrors stopped after the test)."""
    from nbtrain.backends.kubernetes import KubernetesBackend
    from nbtrain.backends.kubernetes.backend import stop_mirrors
    from nbtrain.store import Store

    monkeypatch.setenv("KUBECONFIG", str(KUBECONFIG))
    # a server-side dry run pulls nothing, so it runs without an image; tests that start pods skip in _submit
    monkeypatch.setenv("NBTRAIN_K8S_IMAGE", IMAGE or "nbtrain-pod:dev")
    monkeypatch.setenv("NBTRAIN_K8S_DEVICE", os.environ.get("NBTRAIN_TEST_DEVICE", "cpu"))
    if os.environ.get("NBTRAIN_TEST_NAMESPACE"):
        monkeypatch.setenv("NBTRAIN_K8S_NAMESPACE", os.environ["NBTRAIN_TEST_NAMESPACE"])
    backend = KubernetesBackend(Store(home))
    yield backend
    stop_mirrors()


def _submit(backend: Any, source: str, **fields: Any) -> Any:
    if not IMAGE:
        pytest.skip(IMAGE_REASON)
    from nbtrain.bundle import capture_cell
    from nbtrain.client import submit_bundle
    from nbtrain.spec import JobSpec

    bundle = capture_cell(source, {"__name__": "__main__"})
    return submit_bundle(bundle, JobSpec(backend="kubernetes", **fields), store=backend.store, backend=backend)


@pytest.mark.parametrize("flavor", ["job", "pytorchjob", "jobset"])
def test_server_side_dry_run_with_strict_field_validation(real: Any, flavor: str) -> None:
    from nbtrain.bundle import capture_cell
    from nbtrain.spec import JobSpec

    bundle = capture_cell("1 + 1\n", {"__name__": "__main__"})
    directory = bundle.write(real.store.bundles)
    plan = real.plan(JobSpec(backend="kubernetes", flavor=flavor, nodes=2, procs_per_node=2, timeout_s=600,
                             secret_env={"HF_TOKEN": "hf/token"}), str(directory), bundle.digest, f"dry-{flavor}-0a1b2c")
    try:
        real.submit(plan, dry_run=True)
    except NbtrainError as error:
        if "CustomResourceDefinition" in str(error):
            pytest.skip(str(error))
        raise


def test_a_two_pod_gang_succeeds(real: Any) -> None:
    run = _submit(real, "from accelerate import Accelerator\nimport torch\na = Accelerator()\n"
                  "t = a.reduce(torch.ones(1), 'sum')\nint(t.item())\n", name="cluster-gang", nodes=2, procs_per_node=1)
    try:
        assert run.wait(timeout=900, progress=False) is RunState.SUCCEEDED
        assert run.result() == 2
    finally:
        run.cancel()


def test_a_failing_rank_is_named(real: Any) -> None:
    run = _submit(real, "from accelerate import Accelerator\na = Accelerator()\nif a.process_index == 1:\n"
                  "    raise ValueError('rank one is broken')\na.wait_for_everyone()\n",
                  name="cluster-fail", nodes=2, procs_per_node=1)
    with pytest.raises(RunFailedError, match=r"rank 1 .*ValueError: rank one is broken"):
        run.wait(timeout=900, progress=False)


def test_cancel_leaves_no_pod(real: Any) -> None:
    run = _submit(real, "import time\nfor i in range(3600):\n    print(i, flush=True)\n    time.sleep(1)\n",
                  name="cluster-cancel", nodes=2, procs_per_node=1)
    deadline = time.monotonic() + 600
    while run.status() is not RunState.RUNNING and time.monotonic() < deadline:
        time.sleep(1)
    run.cancel()
    assert run.status() is RunState.CANCELLED
    target = run.backend._target(run.handle)
    pods, _ = run.backend.api().list_items("Pod", target.namespace, label_selector=target.selector)
    assert pods == []
