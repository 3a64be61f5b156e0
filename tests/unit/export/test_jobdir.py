"""Reading a job directory back: nbtrain.toml (with line numbers in errors), the bundle, parameters, k8s/."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nbtrain.backends.base import Plan
from nbtrain.errors import EnvironmentProblem, SpecError
from nbtrain.export.jobdir import load_job
from nbtrain.export.manifests import Manifests, manifest_yaml
from nbtrain.export.parameters import ENV_NAME, Parameter, convert, params_env
from nbtrain.export.static import export_notebook
from nbtrain.export.tomlspec import dump_job_toml, load_job_toml
from nbtrain.spec import JobSpec

NO_K8S = Manifests({}, {"job": "test: no backend"})


@pytest.fixture
def job_dir(notebook_file: Callable[..., Path], tmp_path: Path) -> Path:
    path = notebook_file(
        ("lr = 0.5\nsteps = 3\nlayers = [4, 8]\npath = None", ["parameters"]),
        "%%distributed --nodes 2 --gpus 2 --name toml-test --env A=1 --toleration gpu:NoSchedule\n"
        "print(lr, steps, layers, path)",
    )
    export_notebook(path, tmp_path / "job", manifests=NO_K8S)
    return tmp_path / "job"


def test_reading_back_gives_the_exported_bundle_and_spec(job_dir: Path) -> None:
    job = load_job(job_dir)
    assert job.bundle.digest == (job_dir / "nbtrain.toml").read_text().split('bundle_digest = "')[1][:64]
    assert job.spec.nodes == 2 and job.spec.procs_per_node == 2 and job.spec.name == "toml-test"
    assert job.spec.env == {"A": "1"}
    assert job.spec.tolerations == ({"key": "gpu", "effect": "NoSchedule", "operator": "Exists"},)
    assert {n: (p.kind, p.default) for n, p in job.parameters.items()} == {
        "lr": ("float", 0.5), "steps": ("int", 3), "layers": ("literal", [4, 8]), "path": ("literal", None)
    }
    assert job.bundle.files["main.py"] == (job_dir / "train.py").read_bytes()


def test_parameters_reach_the_spec_env(job_dir: Path) -> None:
    import json

    job = load_job(job_dir)
    spec = job.with_parameters(job.spec, {"lr": "3e-4", "path": "/data"})
    assert json.loads(spec.env[ENV_NAME]) == {"lr": "3e-4", "steps": "3", "layers": "[4, 8]", "path": "/data"}
    assert spec.env["A"] == "1"
    with pytest.raises(SpecError, match="no parameter 'epochs'; parameters: layers, lr, path, steps"):
        job.with_parameters(job.spec, {"epochs": "2"})
    with pytest.raises(SpecError, match="--param steps=two: not a valid int"):
        job.with_parameters(job.spec, {"steps": "two"})


def test_edited_train_py_is_refused_unless_accepted(job_dir: Path) -> None:
    before = load_job(job_dir).bundle.digest
    with open(job_dir / "train.py", "a") as handle:
        handle.write("print('edited')\n")
    with pytest.raises(SpecError, match=r"train.py in .* changed after export .*--accept-edits"):
        load_job(job_dir)
    edited = load_job(job_dir, accept_edits=True)
    assert edited.edited and edited.bundle.digest != before
    assert edited.bundle.manifest["edited_after_export"] == ["train.py"]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[job]\nnodes = 2\nname = oops\n", r"nbtrain.toml: not valid TOML: .*line 3"),
        ("[job]\nnodes = 2\nnodez = 3\n", r"nbtrain.toml line 3: unknown key 'nodez' in \[job\]"),
        ("[job]\nname = 'a'\n\n[job.env]\nX = '1'\n\n[kubernetes]\nflavor = 5\n", r"line 8: kubernetes.flavor = 5 is a int"),
        ("[job]\nname = 'a'\nnodes = 0\n", r"nbtrain.toml line 3 \(job.nodes\): --nodes: 0 is out of range"),
        ("[job]\nbackend = 'ray'\n", r"line 2 \(job.backend\): --backend: unknown value 'ray'"),
        ("[jobs]\nnodes = 1\n", r"line 1: unknown table or key 'jobs'"),
        ("[parameters.lr]\ntype = 'double'\n", r"line 2: parameters.lr.type = 'double'"),
    ],
)
def test_malformed_toml_names_the_line(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "nbtrain.toml"
    path.write_text(text)
    with pytest.raises(SpecError, match=match):
        load_job_toml(path)


def test_toml_round_trip_keeps_every_field(tmp_path: Path) -> None:
    spec = JobSpec(
        name="full", nodes=3, procs_per_node=4, device="cpu", strategy="fsdp", mixed_precision="bf16",
        backend="kubernetes", image="reg/img:1", env={"A": "b"}, checkpoint_dir="/ckpt", max_restarts=2,
        timeout_s=60.0, tracking=False, experiment="exp", namespace="ns", queue="q", flavor="jobset",
        service_account="sa", node_selector={"pool": "gpu"}, cpu="8", memory="64Gi",
        tolerations=({"key": "k", "operator": "Exists", "effect": "NoSchedule"},), secret_env={"T": "s/k"},
        volumes=("data:/ckpt", "cache:/cache"), image_pull_secrets=("creds",), priority_class="high", shm_size="8Gi",
        labels={"team": "ml"}, annotations={"example.com/note": "x y"}, gpu_resource="amd.com/gpu",
        workload_priority="high", spread_by="kubernetes.io/hostname", pod_template="/etc/nbtrain/pod.yaml",
    )
    path = tmp_path / "nbtrain.toml"
    path.write_text(dump_job_toml(spec, [Parameter("lr", "float", 0.1), Parameter("p", "literal", None)], {"cell": "x"}))
    loaded, params, source = load_job_toml(path)
    assert loaded == spec
    assert params == {"lr": Parameter("lr", "float", 0.1), "p": Parameter("p", "literal", None)}
    assert source == {"cell": "x"}


def test_every_jobspec_field_has_a_toml_key() -> None:
    from dataclasses import fields

    from nbtrain.flags import OPTIONS

    assert {f.name for f in fields(JobSpec)} == {o.field for o in OPTIONS if o.toml}


def test_missing_and_odd_directories(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="is missing, not a job directory"):
        load_job(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecError, match=r"not an nbtrain job directory \(no nbtrain.toml\)"):
        load_job(tmp_path / "empty")


def test_parameter_conversion() -> None:
    assert convert("bool", "Yes") is True and convert("bool", "0") is False
    assert convert("float", "3e-4") == 3e-4 and convert("int", "7") == 7
    assert convert("literal", "[1, 2]") == [1, 2] and convert("literal", "/data/x") == "/data/x"
    with pytest.raises(ValueError, match="not a boolean"):
        convert("bool", "maybe")
    with pytest.raises(SpecError, match="none"):
        params_env({}, {"x": "1"})


def test_a_secret_looking_param_is_refused_as_the_param_typed() -> None:
    """Issue 28: named --param NAME, the option the user typed, not the --env NBTRAIN_PARAMS it becomes."""
    parameters = {"api_token": Parameter("api_token", "str", "x"), "lr": Parameter("lr", "float", 0.1)}
    with pytest.raises(SpecError) as caught:
        params_env(parameters, {"api_token": "abcdefgh12345678"})
    assert str(caught.value).startswith("--param api_token=...: this looks like a secret (its name says")
    assert "abcdefgh12345678" not in str(caught.value) and "--allow-secrets" in str(caught.value)
    with pytest.raises(SpecError, match=r"--param lr=\.\.\.: this looks like a secret \(its value looks like"):
        params_env(parameters, {"lr": "hf_" + "Ab1" * 10})
    assert "abcdefgh" in params_env(parameters, {"api_token": "abcdefgh12345678"}, allow_secrets=True)


class _FakeKubernetes:
    """Stands in for the kubernetes backend: its plan's request carries YAML in ``describe``."""

    name = "kubernetes"

    def plan(self, spec: JobSpec, bundle_dir: str, digest: str, run_id: str) -> Plan:
        if spec.flavor == "pytorchjob":
            raise EnvironmentProblem("the PyTorchJob CRD is not installed (test)")
        assert (Path(bundle_dir) / "manifest.json").is_file()
        yaml = f"apiVersion: batch/v1\nkind: {spec.flavor}\nmetadata:\n  name: {run_id}\n# digest {digest}\n"
        return Plan("kubernetes", run_id, spec, digest, bundle_dir, {"describe": yaml})


def test_k8s_manifests_of_every_flavor(notebook_file: Callable[..., Path], tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("nbtrain.export.manifests._backend", lambda: _FakeKubernetes())
    path = notebook_file("%%distributed --name k8s-demo\nx = 1")
    result = export_notebook(path, tmp_path / "job")
    k8s = tmp_path / "job" / "k8s"
    assert sorted(p.name for p in k8s.iterdir()) == ["README.md", "job.yaml", "jobset.yaml", "trainjob.yaml"]
    assert "kind: jobset" in (k8s / "jobset.yaml").read_text()
    assert "pytorchjob: the PyTorchJob CRD is not installed" in (k8s / "README.md").read_text()
    assert result.job.k8s == ("k8s/job.yaml", "k8s/jobset.yaml", "k8s/trainjob.yaml")
    job = load_job(tmp_path / "job")
    assert "name: k8s-demo" in manifest_yaml(job.spec, job.bundle, "job")


def test_k8s_missing_backend_is_explained(job_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    note = (job_dir / "k8s" / "README.md").read_text()
    assert "No manifests were written: test: no backend" in note

    def unavailable() -> Any:
        raise SpecError("--backend kubernetes is not available: no module")

    monkeypatch.setattr("nbtrain.export.manifests._backend", unavailable)
    job = load_job(job_dir)
    with pytest.raises(SpecError, match="kubernetes backend is not available in this installation"):
        manifest_yaml(job.spec, job.bundle)
    with pytest.raises(SpecError, match="--flavor: unknown value 'helm'"):
        manifest_yaml(job.spec, job.bundle, "helm")
