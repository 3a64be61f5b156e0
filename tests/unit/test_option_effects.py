"""No option is honoured in name only: for every option a built-in backend claims to honour (the table), a value
other than the default changes that backend's plan (its request, the launched command, environment, manifests or
batch script, or its notices). Pure: plans only, no process, no cluster, no Slurm."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from nbtrain.backends import extras
from nbtrain.backends.base import Plan
from nbtrain.backends.kubernetes import KubeOptions, KubernetesBackend
from nbtrain.backends.local import LocalBackend
from nbtrain.backends.local import backend as local_backend
from nbtrain.backends.local.gpus import GpuInventory
from nbtrain.backends.slurm import SlurmBackend
from nbtrain.bundle import capture_cell
from nbtrain.errors import NbtrainError
from nbtrain.flags import OPTIONS, TITLES, Option, check_supported
from nbtrain.spec import JobSpec
from nbtrain.store import Store

#: Options no backend sees: applied before the job reaches one (what the cell captures, MLflow, the run id), or
#: the choice of the backend itself. Nothing else may be left out.
BEFORE_ANY_BACKEND = {
    "--name": "the run id is made from it before the backend plans (it receives the id, not the name)",
    "--backend": "chooses the backend",
    "--max-capture-mb": "a cap on the capture of the cell, checked when the bundle is made",
    "--allow-secrets": "lets the capture ship secret-looking values; the backend sees only the bundle",
    "--env-public": "what MLflow params and read-only REST users are shown of --env; the backend sees --env",
    "--experiment": "MLflow's, read by the tracking agent",
    "--no-tracking": "MLflow's, read by the tracking agent",
}

#: option -> (the value tried, the other fields it needs to mean anything); the base job asks for GPUs.
VALUES: Mapping[str, tuple[Any, Mapping[str, Any]]] = {
    "--nodes": (2, {}),
    "--gpus": (2, {}),
    "--device": ("cpu", {"device": "auto"}),
    "--strategy": ("fsdp", {}),
    "--mixed-precision": ("bf16", {}),
    "--fsdp-version": (1, {"strategy": "fsdp"}),
    "--fsdp-sharding": ("shard-grad-op", {"strategy": "fsdp"}),
    "--fsdp-auto-wrap": ("size", {"strategy": "fsdp"}),
    "--fsdp-state-dict": ("full", {"strategy": "fsdp"}),
    "--fsdp-cpu-offload": (True, {"strategy": "fsdp"}),
    "--zero-stage": (3, {"strategy": "deepspeed"}),
    "--zero-offload": ("cpu", {"strategy": "deepspeed"}),
    "--gradient-accumulation": (4, {"strategy": "deepspeed"}),
    "--accelerate-config": ("TEAM_CONFIG", {}),
    "--image": ("ghcr.io/org/other:2", {}),
    "--env": ({"NCCL_DEBUG": "INFO"}, {}),
    "--timeout": (3600.0, {}),
    "--collective-timeout": (60.0, {}),
    "--stall-after": (60.0, {}),
    "--hang-timeout": (900.0, {}),
    "--oversubscribe": (True, {"device": "cpu", "nodes": 16, "procs_per_node": 64}),  # refused without it
    "--warm": (True, {"procs_per_node": 2}),  # a warm gang needs more than one process
    "--warm-ttl": (60.0, {"warm": True, "procs_per_node": 2}),
    "--checkpoint-dir": ("/data/ckpt", {}),
    "--max-restarts": (2, {}),
    "--keep-checkpoints": (5, {}),
    "--namespace": ("team-a", {}),
    "--queue": ("team-queue", {}),
    "--flavor": ("jobset", {}),
    "--service-account": ("trainer", {}),
    "--cpu": ("8", {}),
    "--memory": ("64Gi", {}),
    "--node-selector": ({"pool": "gpu"}, {}),
    "--toleration": (({"key": "gpu", "effect": "NoSchedule", "operator": "Exists"},), {}),
    "--secret-env": ({"HF_TOKEN": "hf/token"}, {}),
    "--volume": (("other:/other",), {}),
    "--image-pull-secret": (("registry-creds",), {}),
    "--priority-class": ("high", {}),
    "--shm-size": ("16Gi", {}),
    "--label": ({"cost-center": "ml"}, {}),
    "--annotation": ({"sidecar.istio.io/inject": "false"}, {}),
    "--gpu-resource": ("amd.com/gpu", {}),
    "--workload-priority": ("research-high", {"queue": "team-queue"}),
    "--spread-by": ("kubernetes.io/hostname", {}),
    "--pod-template": (str(Path(__file__).resolve().parents[1] / "data" / "pod-template.yaml"), {}),
    "--partition": ("gpu", {}),
    "--account": ("team", {}),
    "--qos": ("high", {}),
    "--time": ("2:00:00", {}),
    "--constraint": ("a100", {}),
    "--reservation": ("maint", {}),
    "--exclusive": (True, {}),
    "--sbatch": ({"mem-per-cpu": "4G"}, {}),
}
#: What a backend needs of every job of this test (Kubernetes keeps checkpoints only on a volume).
BACKEND_BASE: Mapping[str, Mapping[str, Any]] = {"kubernetes": {"volumes": ("data:/data",)}}

#: Options whose effect is that a job refused without them is planned.
LIFTS_A_REFUSAL = {"--oversubscribe"}

Planner = Callable[[JobSpec], Plan]


def _honoured(backend: str) -> list[Option]:
    return [o for o in OPTIONS if o.field is not None and (o.backends is None or backend in o.backends)]


CASES = [(b, o.flag) for b in TITLES for o in _honoured(b) if o.flag not in BEFORE_ANY_BACKEND]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    captured = capture_cell("STEPS * 2\n", {"__name__": "__main__", "STEPS": 3})
    return str(captured.write(tmp_path_factory.mktemp("bundles"))), captured.digest


@pytest.fixture
def planner(bundle: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Planner]:
    """``planner(backend)(spec)``: that backend's plan of ``spec``, deterministic (fixed port, four fake GPUs)."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.setattr(local_backend, "free_port", lambda: 29511)
    monkeypatch.setattr(local_backend, "_accelerate_available", lambda python: True)
    monkeypatch.setattr(extras, "importable", lambda python, module: True)  # deepspeed
    store = Store(tmp_path / "home")

    def make(name: str) -> Planner:
        if name == "local":
            gpus = GpuInventory(ids=("0", "1", "2", "3"), names=("fake",) * 4)
            local = LocalBackend(store, gpus=gpus)
            return lambda spec: local.plan(spec, bundle[0], bundle[1], "job-3fa9c2")
        if name == "kubernetes":
            kube = KubernetesBackend(store, options=KubeOptions(image="ghcr.io/org/train:1"))
            return lambda spec: kube.plan(spec, bundle[0], bundle[1], "job-3fa9c2")
        slurm = SlurmBackend(store)

        def plan_slurm(spec: JobSpec) -> Plan:  # without asking Slurm (sbatch --test-only): there is none here
            check_supported(spec, "slurm", slurm.capabilities)
            return slurm._plan(spec, bundle[0], bundle[1], "job-3fa9c2", check=False)

        return plan_slurm

    return make


def _shown(plan: Plan) -> str:
    return json.dumps({"request": plan.request, "notices": plan.notices}, sort_keys=True, default=str)


@pytest.mark.parametrize(("backend", "flag"), CASES, ids=[f"{b}{f}" for b, f in CASES])
def test_every_honoured_option_changes_the_plan(backend: str, flag: str, planner: Callable[[str], Planner],
                                                tmp_path: Path) -> None:
    option = next(o for o in OPTIONS if o.flag == flag)
    assert option.field is not None
    assert flag in VALUES, f"give {flag} a value to try in VALUES (or a reason in BEFORE_ANY_BACKEND)"
    value, needs = VALUES[flag]
    if value == "TEAM_CONFIG":
        value = str(tmp_path / "team.yaml")
        Path(value).write_text("dynamo_config:\n  dynamo_backend: INDUCTOR\n")
    backend_base = {k: v for k, v in BACKEND_BASE.get(backend, {}).items() if k != option.field}
    fields = {"backend": backend, "device": "gpu", **backend_base, **needs}
    plan = planner(backend)
    base = JobSpec(**fields)
    assert getattr(base, option.field) == option.default, f"{flag}: the base job must leave it at its default"
    changed = base.with_changes(**{option.field: value})
    after = _shown(plan(changed))
    if flag in LIFTS_A_REFUSAL:
        with pytest.raises(NbtrainError):
            plan(base)
        return
    assert _shown(plan(base)) != after, f"{flag} {value!r}: {backend} honours it by the table; its plan is the same"


def test_every_option_is_either_tried_or_left_out_for_a_reason() -> None:
    flags = {o.flag for o in OPTIONS if o.field is not None}
    assert flags == set(VALUES) | set(BEFORE_ANY_BACKEND)
    assert not set(VALUES) & set(BEFORE_ANY_BACKEND)


#: What --flavor trainjob refuses (a TrainJob has no field for it; docs/kubernetes.md, "TrainJob"), each by name.
TRAINJOB_REFUSES = {
    "--priority-class": "no priorityClassName in Trainer's pod patch",
    "--spread-by": "no topologySpreadConstraints in Trainer's pod patch",
}
K8S_CASES = [o.flag for o in _honoured("kubernetes") if o.flag not in BEFORE_ANY_BACKEND]


@pytest.mark.parametrize("flag", K8S_CASES)
def test_the_trainjob_flavor_honours_or_refuses_by_name_every_kubernetes_option(
        flag: str, planner: Callable[[str], Planner], tmp_path: Path) -> None:
    """The Kubernetes backend honours these options (the table); with --flavor trainjob each one still changes the
    plan (the TrainJob), or is refused with an error that names it: none is dropped on the way to a TrainJob."""
    option = next(o for o in OPTIONS if o.flag == flag)
    assert option.field is not None
    if flag not in VALUES:
        pytest.skip(f"{flag} has no value to try yet (test_every_option_is_either_tried_or_left_out_for_a_reason)")
    value, needs = VALUES[flag]
    if value == "TEAM_CONFIG":
        value = str(tmp_path / "team.yaml")
        Path(value).write_text("dynamo_config:\n  dynamo_backend: INDUCTOR\n")
    base_fields = {k: v for k, v in BACKEND_BASE["kubernetes"].items() if k != option.field}
    base = JobSpec(**{"backend": "kubernetes", "device": "gpu", **base_fields, **needs, "flavor": "trainjob"})
    changed = base.with_changes(**{option.field: value})
    plan = planner("kubernetes")
    if flag in TRAINJOB_REFUSES:
        with pytest.raises(NbtrainError, match=re.escape(flag)):
            plan(changed)
        return
    assert _shown(plan(base)) != _shown(plan(changed)), f"{flag} {value!r}: the TrainJob's plan is the same"
