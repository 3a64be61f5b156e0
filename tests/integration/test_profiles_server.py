"""``GET /nbtrain/profiles`` on a real jupyter server: the dialog's list of profiles with their fixed and locked
values, secrets masked, a broken profile file listed as unreadable (not a 500), the notebook's own nbtrain.toml
profiles with ?path=, and the runs' authorisation (a read-only user reads it; one who may not read runs gets 403)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tornado.httpclient

from .test_stats_server import ASKED, NoNbtrainAuthorizer, ReadOnlyAuthorizer

TEAM = """\
version = "2.1"
description = "the team's GPUs"
contact = "#ml-platform"
locked = ["strategy", "env"]

[options]
nodes = 2
gpus = 4
strategy = "ddp"
no-tracking = true
env = { NCCL_DEBUG = "WARN", HF_TOKEN = "hf_abcdefghijklmnopqrstuvwxyz012345" }
"""


@pytest.fixture
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's profiles: one good (with a secret in its env), one broken."""
    directory = tmp_path / "config"
    (directory / "profiles").mkdir(parents=True)
    (directory / "profiles" / "team.toml").write_text(TEAM, encoding="utf-8")
    (directory / "profiles" / "broken.toml").write_text('version = "1"\n[options]\ngpu = 2\n', encoding="utf-8")
    monkeypatch.setenv("NBTRAIN_CONFIG_DIR", str(directory))
    return directory


@pytest.fixture
def jp_server_config(home: Path, config_dir: Path) -> dict[str, Any]:
    return {"ServerApp": {"jpserver_extensions": {"nbtrain": True}}}


async def _get(jp_fetch: Any, **params: str) -> Any:
    return json.loads((await jp_fetch("nbtrain", "profiles", params=params or None)).body)


async def test_lists_every_profile_with_its_values_and_locks(jp_fetch: Any) -> None:
    answer = await _get(jp_fetch)
    by_name = {p["name"]: p for p in answer["profiles"]}
    assert [p["name"] for p in answer["profiles"]] == sorted(by_name)
    assert {"multinode-ddp", "team"} <= set(by_name)  # built-in and the user's
    team = by_name["team"]
    assert (team["version"], team["description"], team["origin"]) == ("2.1", "the team's GPUs", "user")
    assert team["source"].endswith("team.toml") and team["contact"] == "#ml-platform"
    assert team["locked"] == ["--env", "--strategy"]
    assert team["options"]["--nodes"] == 2 and team["options"]["--strategy"] == "ddp"
    assert team["options"]["--no-tracking"] is True
    assert team["options"]["--env"] == {"NCCL_DEBUG": "WARN", "HF_TOKEN": "***"}  # masked, the name kept
    assert "hf_abcdefghij" not in json.dumps(answer)
    assert by_name["multinode-ddp"]["locked"] == ["--strategy"]


async def test_a_broken_profile_file_is_listed_as_unreadable(jp_fetch: Any) -> None:
    answer = await _get(jp_fetch)
    assert "broken" not in {p["name"] for p in answer["profiles"]}
    [problem] = answer["unreadable"]
    assert "broken.toml" in problem["message"] and "unknown option 'gpu'" in problem["message"]


async def test_the_notebooks_own_nbtrain_toml(jp_fetch: Any, jp_root_dir: Path) -> None:
    (jp_root_dir / "project").mkdir()
    (jp_root_dir / "project" / "nbtrain.toml").write_text(
        '[profiles.project-small]\nversion = "0.1"\n[profiles.project-small.options]\ngpus = 1\n', encoding="utf-8")
    assert "project-small" not in {p["name"] for p in (await _get(jp_fetch))["profiles"]}
    beside = await _get(jp_fetch, path="project/train.ipynb")
    assert {p["name"]: p["options"] for p in beside["profiles"]}["project-small"] == {"--gpus": 1}
    for path in ("../elsewhere/nb.ipynb", "/etc/nb.ipynb"):
        with pytest.raises(tornado.httpclient.HTTPClientError) as caught:
            await _get(jp_fetch, path=path)
        assert caught.value.code == 400 and caught.value.response is not None
        assert "?path=" in json.loads(caught.value.response.body)["message"]


class TestReadOnlyUser:
    @pytest.fixture
    def jp_server_config(self, home: Path, config_dir: Path) -> dict[str, Any]:
        return {"ServerApp": {"jpserver_extensions": {"nbtrain": True}, "authorizer_class": ReadOnlyAuthorizer}}

    async def test_reads_the_profiles_as_it_reads_runs(self, jp_fetch: Any) -> None:
        ASKED.clear()
        answer = await _get(jp_fetch)
        assert "team" in {p["name"] for p in answer["profiles"]}
        assert ASKED == [("read", "nbtrain")]


class TestUserWithoutRuns:
    @pytest.fixture
    def jp_server_config(self, home: Path, config_dir: Path) -> dict[str, Any]:
        return {"ServerApp": {"jpserver_extensions": {"nbtrain": True}, "authorizer_class": NoNbtrainAuthorizer}}

    async def test_is_refused_the_profiles(self, jp_fetch: Any) -> None:
        with pytest.raises(tornado.httpclient.HTTPClientError) as caught:
            await jp_fetch("nbtrain", "profiles")
        assert caught.value.code == 403
