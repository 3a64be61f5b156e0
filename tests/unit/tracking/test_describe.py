"""What an MLflow run says about an nbtrain run: experiment name, params, tags, keys (pure functions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nbtrain.bundle import capture_cell, capture_function
from nbtrain.model import Failure
from nbtrain.spec import JobSpec
from nbtrain.tracking.describe import (
    experiment_name,
    failure_text,
    git_commit,
    literal_params,
    mlflow_key,
    parameter_overrides,
    run_tags,
    spec_params,
    worker_tags,
)


@pytest.mark.parametrize(
    ("experiment", "notebook", "expected"),
    [
        ("vision", {"path": "/home/me/digits.ipynb"}, "vision"),
        (None, {"path": "/home/me/work/digits.ipynb"}, "digits"),
        (None, {"path": "relative/dir/Fine Tune.ipynb"}, "Fine Tune"),
        ("  ", {"path": "x.ipynb"}, "x"),
        (None, {}, "nbtrain"),
        (None, {"path": ""}, "nbtrain"),
    ],
)
def test_experiment_name(experiment: str | None, notebook: dict[str, str], expected: str) -> None:
    assert experiment_name(JobSpec(experiment=experiment), notebook) == expected


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("loss", "loss"),
        ("train/loss", "train/loss"),
        ("val loss:top-1.5", "val loss:top-1.5"),
        ("acc@1 (%)", "acc_1 ___"),
        ("/abs", "_abs"),
        ("a//b", "a__b"),
        ("../up", "_.._up"),
        ("trailing/", "trailing_"),
        ("", "_"),
        ("x" * 300, "x" * 250),
    ],
)
def test_mlflow_key_is_always_accepted_by_mlflow(name: str, key: str) -> None:
    from mlflow.utils.validation import path_not_unique, validate_param_and_metric_name

    assert mlflow_key(name) == key
    assert validate_param_and_metric_name(key) and not path_not_unique(key)


def test_spec_params_flatten_every_field_and_mask_secret_env() -> None:
    spec = JobSpec(name="digits", nodes=2, procs_per_node=4, env={"SEED": "1", "HF_TOKEN": "hf_abcdefgh123"},
                   node_selector={"kubernetes.io/arch": "amd64"}, tolerations=({"key": "gpu", "effect": "NoSchedule"},))
    params = spec_params(spec)
    assert params["nbtrain.name"] == "digits"
    assert params["nbtrain.nodes"] == "2" and params["nbtrain.procs_per_node"] == "4"
    assert params["nbtrain.device"] == "auto" and params["nbtrain.strategy"] == "ddp"
    assert params["nbtrain.env.SEED"] == "1" and params["nbtrain.env.HF_TOKEN"] == "***"
    assert params["nbtrain.node_selector.kubernetes.io/arch"] == "amd64"
    assert params["nbtrain.tolerations.0.effect"] == "NoSchedule"
    assert params["nbtrain.timeout_s"] == "None"
    assert "nbtrain.secret_env" not in params  # empty containers are left out
    assert all(len(v) <= 6000 for v in params.values())


def test_literal_params_from_a_real_cell_bundle() -> None:
    namespace = {"LR": 0.001, "OPTIMIZER": "adam", "LAYERS": [64, 32], "DROPOUT": float("nan"), "USE_AMP": True,
                 "NOTHING": None, "api_key": "not-really-a-key", "NAMES": frozenset({"a"})}
    cell = "x = (LR, OPTIMIZER, LAYERS, DROPOUT, USE_AMP, NOTHING, api_key, NAMES)\nLR = 5\n"
    bundle = capture_cell(cell, namespace, options=_allow_secrets())
    names = [c["name"] for c in bundle.manifest["captured"] if c["kind"] == "literal"]
    params = literal_params(bundle.main_source, names)
    assert params == {"LR": "0.001", "OPTIMIZER": "adam", "LAYERS": "[64, 32]", "DROPOUT": "float('nan')",
                      "USE_AMP": "True", "NOTHING": "None", "api_key": "***", "NAMES": "frozenset({'a'})"}


def test_literal_params_of_a_function_bundle_name_its_arguments() -> None:
    bundle = capture_function(_train, (3,), {"lr": 0.5, "tag": "x"})
    names = [c["name"] for c in bundle.manifest["captured"] if c["kind"] == "literal"]
    assert literal_params(bundle.main_source, names) == {"args": "(3,)", "lr": "0.5", "tag": "x"}


def test_a_job_parameter_is_tracked_with_the_value_it_runs_with() -> None:
    from nbtrain.export.parameters import add_parameters

    bundle = capture_cell("x = (LR, api_key)\n", {"LR": 0.001, "api_key": "plain"}, options=_allow_secrets())
    bundle, _ = add_parameters(bundle, ["LR", "api_key"], {"LR": 0.001, "api_key": "plain"})
    names = [c["name"] for c in bundle.manifest["captured"] if c["kind"] == "literal"]
    assert literal_params(bundle.main_source, names)["LR"] == "0.001"  # main.py's first assignment: the default
    env = {"NBTRAIN_PARAMS": json.dumps({"LR": "0.05", "api_key": "sk-live-abcdefghijklmnopqrstuvwxyz", "OTHER": "1"})}
    assert parameter_overrides(bundle.manifest, env) == {"LR": "0.05", "api_key": "***"}
    assert parameter_overrides(bundle.manifest, {"NBTRAIN_PARAMS": "not json"}) == {}
    assert parameter_overrides(None, env) == {}


def test_literal_params_tolerate_broken_source() -> None:
    assert literal_params("x = (", ["x"]) == {}
    assert literal_params("y = 1\n", ["x"]) == {}


def test_run_tags_name_identity_source_versions_and_shape() -> None:
    bundle = capture_cell("y = 1\n", {})
    spec = JobSpec(nodes=2, procs_per_node=3, backend="kubernetes", image="ghcr.io/me/train:1")
    tags = run_tags(run_id="r-1", spec=spec, backend="kubernetes", bundle_digest=bundle.digest,
                    notebook={"path": "/w/nb.ipynb", "cell_id": "c1"}, manifest=bundle.manifest, commit="a" * 40,
                    user="me")
    assert tags["nbtrain.run_id"] == "r-1" and tags["nbtrain.bundle_digest"] == bundle.digest
    assert tags["nbtrain.cell_id"] == "c1" and tags["nbtrain.cell_sha256"] == bundle.manifest["cell"]["sha256"]
    assert tags["nbtrain.notebook"] == tags["mlflow.source.name"] == "/w/nb.ipynb"
    assert tags["nbtrain.git_commit"] == tags["mlflow.source.git.commit"] == "a" * 40
    assert tags["nbtrain.python"] == bundle.manifest["versions"]["python"]
    assert tags["nbtrain.torch"] == bundle.manifest["versions"]["torch"]
    assert tags["nbtrain.accelerate"] == bundle.manifest["versions"]["accelerate"]
    assert tags["nbtrain.version"] == bundle.manifest["created_by"].split()[1]
    assert (tags["nbtrain.nodes"], tags["nbtrain.procs"], tags["nbtrain.world_size"]) == ("2", "3", "6")
    assert tags["nbtrain.backend"] == "kubernetes" and tags["nbtrain.image"] == "ghcr.io/me/train:1"
    assert tags["mlflow.user"] == "me" and tags["nbtrain.kind"] == "cell"


def test_run_tags_leave_unknowns_out() -> None:
    tags = run_tags(run_id="r", spec=JobSpec(), backend="local", bundle_digest="d", notebook={}, manifest=None,
                    commit=None)
    assert "nbtrain.image" not in tags and "nbtrain.git_commit" not in tags and "nbtrain.notebook" not in tags
    assert "None" not in tags.values()


def test_worker_tags() -> None:
    assert worker_tags({"python": "3.11.7", "torch": "2.13.0", "gpu_name": None, "pid": 4}) == {
        "nbtrain.worker.python": "3.11.7", "nbtrain.worker.torch": "2.13.0"}


def test_git_commit_of_the_notebook_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "x"], check=True, env=env)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert git_commit({"path": str(repo / "notebooks" / "nb.ipynb")}) == head
    assert git_commit({"path": "notebooks/nb.ipynb"}, cwd=repo) == head  # relative to the kernel's directory
    assert git_commit({}, cwd=repo / "notebooks") == head
    outside = tmp_path / "outside"
    outside.mkdir()
    assert git_commit({}, cwd=outside) is None


def test_failure_text_has_summary_and_traceback() -> None:
    failure = Failure(reason="exception", rank=3, node=1, exc_type="ValueError", message="boom", cell_line=4,
                      traceback="Traceback (most recent call last):\nValueError: boom\n")
    text = failure_text(failure.to_dict())
    assert text.startswith("rank 3 (node 1) failed: ValueError: boom (cell line 4)\n")
    assert "Traceback of the first failing rank:\nTraceback (most recent call last):" in text
    killed = failure_text(Failure(reason="", rank=2, signal="SIGKILL", last_lines=("a", "b")).to_dict())
    assert "killed by SIGKILL" in killed and killed.endswith("Last lines of the first failing rank:\na\nb\n")


def test_importing_tracking_does_not_import_mlflow() -> None:
    code = "import sys, nbtrain.tracking; assert 'mlflow' not in sys.modules and 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def _allow_secrets() -> object:
    from nbtrain.bundle import CaptureOptions

    return CaptureOptions(allow_secrets=True)


def _train(steps: int, lr: float = 0.1, tag: str = "") -> float:
    return steps * lr
