"""Storage URIs and roots: the pure resolver, its errors, and where roots come from."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nbtrain.errors import SpecError
from nbtrain.storage import Kind, StorageRoots, join, load_roots, local_path, parse, resolve, roots_from_table
from nbtrain.storage.checkpoints import run_checkpoint_root
from nbtrain.storage.config import user_config_path
from nbtrain.tracking.describe import dataset_tags

ROOTS = StorageRoots(datasets="s3://bucket/datasets/", checkpoints="/mnt/ckpt", artifacts="file:///srv/art")


@pytest.mark.parametrize(("uri", "expected"), [
    ("dataset://digits@v1", "s3://bucket/datasets/digits/v1"),
    ("dataset://digits", "s3://bucket/datasets/digits"),
    ("dataset://vision/imagenet@2024.01", "s3://bucket/datasets/vision/imagenet/2024.01"),
    ("checkpoint://team/llm", "/mnt/ckpt/team/llm"),
    ("artifact://reports/x.html", "file:///srv/art/reports/x.html"),
    ("s3://other/thing", "s3://other/thing"),  # not a storage URI: unchanged
    ("/plain/path", "/plain/path"),
])
def test_resolve_joins_the_uri_under_its_root(uri: str, expected: str) -> None:
    assert resolve(uri, ROOTS) == expected


def test_parse_keeps_name_and_version() -> None:
    uri = parse("dataset://digits@v1")
    assert (uri.kind, uri.name, uri.version, str(uri)) == (Kind.DATASET, "digits", "v1", "dataset://digits@v1")


def test_missing_root_names_the_uri_the_root_and_both_fixes() -> None:
    with pytest.raises(SpecError) as caught:
        resolve("dataset://digits@v1", StorageRoots(checkpoints="/x"))
    message = str(caught.value)
    assert "dataset://digits@v1" in message and "datasets root" in message
    assert "NBTRAIN_STORAGE_DATASETS" in message and "[storage]" in message


@pytest.mark.parametrize(("uri", "words"), [
    ("dataset://../etc@v1", "no '.' or '..' part"),
    ("dataset://digits@", "version ''"),
    ("dataset://digits@..", "version '..' must be letters, digits, '_', '.' or '-', and not only dots"),  # issue 28
    ("dataset://digits@.", "version '.' must be"),
    ("checkpoint://run@v1", "only dataset:// URIs take an @VERSION"),
    ("dataset://", "the name ''"),
    ("dataset://a b", "the name 'a b'"),
])
def test_malformed_uris_are_refused_with_the_reason(uri: str, words: str) -> None:
    with pytest.raises(SpecError, match=words.replace(".", r"\.").replace("(", r"\(")) as caught:
        resolve(uri, ROOTS)
    assert repr(uri) in str(caught.value)


def test_join_and_local_path_for_urls_and_paths() -> None:
    assert join("s3://b", "x/y") == "s3://b/x/y"
    assert join("s3://b/p/", "/x") == "s3://b/p/x"
    assert join("file:///", "x") == "file:///x"
    assert join("/data", "x") == "/data/x"
    assert local_path("file:///srv/a%20b") == "/srv/a b"
    assert local_path("/srv/a") == "/srv/a"
    assert local_path("s3://b/a") is None
    assert local_path("file://otherhost/a") is None


def test_storage_table_rejects_unknown_keys_and_empty_values() -> None:
    with pytest.raises(SpecError, match=r"proj.toml: unknown key 'dataset' in \[storage\]"):
        roots_from_table({"dataset": "s3://b"}, "proj.toml")
    with pytest.raises(SpecError, match="must be a non-empty string"):
        roots_from_table({"datasets": ""}, "proj.toml")


def test_env_overrides_project_which_overrides_user_config(tmp_path: Path) -> None:
    user = tmp_path / "user.toml"
    user.write_text('[storage]\ndatasets = "/user/ds"\nartifacts = "/user/art"\ncheckpoints = "/user/ck"\n')
    project = tmp_path / "proj"
    project.mkdir()
    (project / "nbtrain.toml").write_text('[job]\nnodes = 1\n[storage]\ndatasets = "s3://proj/ds"\n'
                                          'checkpoints = "/proj/ck"\n')
    env = {"NBTRAIN_CONFIG": str(user), "NBTRAIN_STORAGE_CHECKPOINTS": "gs://env/ck"}
    roots = load_roots(project, env)
    assert (roots.datasets, roots.checkpoints, roots.artifacts) == ("s3://proj/ds", "gs://env/ck", "/user/art")
    assert roots.source(Kind.CHECKPOINT) == "NBTRAIN_STORAGE_CHECKPOINTS"
    assert roots.source(Kind.DATASET) == f"{project / 'nbtrain.toml'} [storage] datasets"
    assert roots.env() == {"NBTRAIN_STORAGE_DATASETS": "s3://proj/ds", "NBTRAIN_STORAGE_CHECKPOINTS": "gs://env/ck",
                           "NBTRAIN_STORAGE_ARTIFACTS": "/user/art"}


def test_user_config_path_follows_xdg() -> None:
    assert user_config_path({"XDG_CONFIG_HOME": "/cfg"}) == Path("/cfg/nbtrain/config.toml")
    assert user_config_path({"NBTRAIN_CONFIG": "/x.toml", "XDG_CONFIG_HOME": "/cfg"}) == Path("/x.toml")


def test_malformed_project_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "nbtrain.toml").write_text("[storage\n")
    with pytest.raises(SpecError, match=r"nbtrain.toml: cannot read its \[storage\] table"):
        load_roots(tmp_path, {"NBTRAIN_CONFIG": str(tmp_path / "none.toml")})


def test_checkpoint_dir_local_paths_are_unchanged(tmp_path: Path) -> None:
    default = tmp_path / "run" / "checkpoints"
    assert run_checkpoint_root(None, "r1", default=default) == str(default)
    assert run_checkpoint_root(str(tmp_path / "ck"), "r1", default=default) == str(tmp_path / "ck" / "r1")
    assert run_checkpoint_root(f"file://{tmp_path}/ck", "r1", default=default) == str(tmp_path / "ck" / "r1")


def test_checkpoint_dir_urls_stay_urls_and_checkpoint_uris_resolve(tmp_path: Path) -> None:
    default = tmp_path / "d"
    assert run_checkpoint_root("s3://bucket/prefix/", "r1", default=default) == "s3://bucket/prefix/r1"
    roots = StorageRoots(checkpoints="s3://bucket/ck")
    assert run_checkpoint_root("checkpoint://team", "r1", default=default, roots=roots) == "s3://bucket/ck/team/r1"


@pytest.mark.parametrize(("value", "words"), [
    ("nosuch://x/y", "fsspec knows no 'nosuch' protocol"),
    ("s3://AKIAEXAMPLE:secret@bucket/p", "credentials in the URL are refused"),
])
def test_checkpoint_dir_bad_urls_are_spec_errors(tmp_path: Path, value: str, words: str) -> None:
    with pytest.raises(SpecError, match=words) as caught:
        run_checkpoint_root(value, "r1", default=tmp_path)
    assert "--checkpoint-dir" in str(caught.value) and "secret" not in str(caught.value)


def test_s3_without_s3fs_says_which_extra_to_install() -> None:
    probe = ("import sys; sys.modules['s3fs'] = None\n"
             "from nbtrain.storage.checkpoints import run_checkpoint_root\n"
             "from pathlib import Path\n"
             "try:\n    run_checkpoint_root('s3://bucket/p', 'r1', default=Path('/tmp'))\n"
             "except Exception as e:\n    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.startswith("SpecError --checkpoint-dir s3://bucket/p: the s3:// filesystem is not installed")
    assert "pip install 'nbtrain[s3]'" in out.stdout


def test_dataset_tags_name_the_first_and_list_all() -> None:
    assert dataset_tags({"datasets": ["digits@v1", "extra"]}) == {
        "nbtrain.dataset": "digits", "nbtrain.dataset_version": "v1", "nbtrain.datasets": "digits@v1,extra"}
    assert dataset_tags({"datasets": ["raw"]}) == {"nbtrain.dataset": "raw", "nbtrain.datasets": "raw"}
    assert dataset_tags({}) == {}
