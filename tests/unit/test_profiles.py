"""Profiles: parsing and validation, layering (default < nbtrain.toml < profile < flag), locks and provenance (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbtrain.errors import SpecError
from nbtrain.flags import build_parser
from nbtrain.profiles import BUILTIN_DIR, load_catalog, parse_document, parse_profile, render_sources, resolve
from nbtrain.profiles.apply import toml_sources
from nbtrain.spec import JobSpec

TEAM = {"version": "2.1", "description": "team GPUs", "contact": "#ml-platform", "locked": ["strategy", "env"],
        "options": {"nodes": 2, "gpus": 4, "strategy": "ddp", "max-restarts": 2, "env": {"NCCL_DEBUG": "WARN"},
                    "no-tracking": True, "checkpoint-dir": "/shared/ckpt"}}


def _args(line: str) -> object:
    return build_parser("cli").parse_args(line.split())


def test_profile_values_are_checked_by_the_table_and_jobspec() -> None:
    profile = parse_profile("team", TEAM, "team.toml")
    assert profile.values["--gpus"] == 4 and profile.locked == frozenset({"--strategy", "--env"})
    assert profile.label == "team 2.1" and profile.who_to_ask() == "#ml-platform"
    for options, expected in [
        ({"gpu": 2}, "unknown option 'gpu'. Did you mean gpus"),
        ({"strategy": "zero"}, "--strategy: unknown value 'zero'"),
        ({"nodes": "2"}, "nodes = '2' is a str; expected an integer"),
        ({"allow-secrets": 1}, "expected true or false"),
        ({"dry-run": True}, "unknown option 'dry-run'"),  # a surface option, not a job option
    ]:
        with pytest.raises(SpecError) as error:
            parse_profile("bad", {"version": "1", "options": options}, "/etc/team/bad.toml")
        assert "profile 'bad' (/etc/team/bad.toml)" in str(error.value) and expected in str(error.value)


def test_profile_shape_errors_name_the_fix() -> None:
    with pytest.raises(SpecError, match="version must be a non-empty string"):
        parse_profile("p", {"options": {}}, "p.toml")
    with pytest.raises(SpecError, match="locks gpus but does not set it"):
        parse_profile("p", {"version": "1", "locked": ["gpus"], "options": {}}, "p.toml")
    with pytest.raises(SpecError, match=r"unknown key 'gpus'.*options"):
        parse_profile("p", {"version": "1", "gpus": 2}, "p.toml")
    assert [p.name for p in parse_document({"profiles": {"a": {"version": "1"}, "b": {"version": "2"}}}, "x")] == [
        "a", "b"]
    assert parse_document({"version": "1"}, "x.toml", default_name="x")[0].name == "x"


def test_layers_and_where_each_value_came_from() -> None:
    profile = parse_profile("team", TEAM, "team.toml")
    base = JobSpec(nodes=3, name="from-toml", keep_checkpoints=5)
    resolved = resolve(base, _args("--gpus 1 --name typed"), profile,
                       {"nodes": "nbtrain.toml", "name": "nbtrain.toml", "keep_checkpoints": "nbtrain.toml"})
    spec = resolved.spec
    assert (spec.nodes, spec.procs_per_node, spec.name, spec.keep_checkpoints) == (2, 1, "typed", 5)
    assert spec.tracking is False and spec.checkpoint_dir == "/shared/ckpt"
    sources = resolved.sources
    assert sources["--nodes"] == "profile team 2.1"  # the profile beats nbtrain.toml
    assert sources["--gpus"] == "flag" and sources["--name"] == "flag"
    assert sources["--keep-checkpoints"] == "nbtrain.toml" and sources["--strategy"] == "profile team 2.1, locked"
    assert sources["--mixed-precision"] == "default"
    text = render_sources(resolved)
    assert "--nodes 2" in text and "profile team 2.1" in text and "--keep-checkpoints 5" in text
    assert "--no-tracking" in text and "other options: default" in text


def test_a_locked_value_cannot_be_overridden() -> None:
    profile = parse_profile("team", TEAM, "/etc/nbtrain/team.toml")
    with pytest.raises(SpecError) as error:
        resolve(JobSpec(), _args("--strategy fsdp"), profile)
    message = str(error.value)
    assert message.startswith("--strategy fsdp: profile 'team' (version 2.1, /etc/nbtrain/team.toml) locks strategy "
                              "to ddp; nothing was started.") and "ask #ml-platform" in message
    with pytest.raises(SpecError, match="locks env to NCCL_DEBUG=WARN"):  # adding to a locked mapping changes it
        resolve(JobSpec(), _args("--env EXTRA=1"), profile)
    # typing the locked value itself is no override
    assert resolve(JobSpec(), _args("--strategy ddp"), profile).spec.strategy.value == "ddp"


def test_builtin_templates_parse_and_document_themselves() -> None:
    catalog = load_catalog(Path("/nonexistent/nbtrain.toml"))
    builtin = [p for p in catalog.profiles.values() if p.origin == "built-in"]
    assert {p.name for p in builtin} == {p.stem for p in BUILTIN_DIR.glob("*.toml")}
    assert len(builtin) >= 6 and not catalog.problems
    for profile in builtin:
        for topic in ("Resources:", "Logging:", "Checkpointing:", "Retries:", f"examples/templates/{profile.name}"):
            assert topic in profile.docs, (profile.name, topic)


def test_catalog_sources_shadowing_and_broken_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBTRAIN_CONFIG_DIR", str(tmp_path / "config"))
    (tmp_path / "config" / "profiles").mkdir(parents=True)
    (tmp_path / "config" / "profiles" / "mine.toml").write_text('version = "1"\n[options]\ngpus = 2\n')
    (tmp_path / "config" / "profiles" / "broken.toml").write_text('version = "1"\n[options]\ngpu = 2\n')
    project = tmp_path / "nbtrain.toml"
    project.write_text('[job]\nnodes = 1\n[profiles.mine]\nversion = "3"\n[profiles.mine.options]\nnodes = 4\n')
    catalog = load_catalog(project)
    assert catalog.get("mine").version == "3" and catalog.get("mine").origin == "project"
    assert [(h.origin, b.origin) for h, b in catalog.shadowed] == [("user", "project")]
    (problem,) = catalog.problems
    assert "broken.toml" in problem and "unknown option 'gpu'" in problem
    with pytest.raises(SpecError, match=r"no such profile; known profiles: .*mine") as error:
        catalog.get("absent")
    assert "broken.toml" in str(error.value)


def test_toml_sources_name_the_keys_present() -> None:
    assert toml_sources({"job": {"nodes": 2}, "strategy": {"zero_stage": 3}, "parameters": {}}) == {
        "nodes": "nbtrain.toml", "zero_stage": "nbtrain.toml"}


def test_export_applies_the_profile_of_the_magic_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nbtrain.export.notebook import job_spec_from_header

    monkeypatch.chdir(tmp_path)  # no project nbtrain.toml
    spec = job_spec_from_header("--profile multinode-ddp --gpus 1 --out run", "cell 3")
    assert (spec.nodes, spec.procs_per_node, spec.max_restarts, spec.collective_timeout_s) == (2, 1, 2, 600.0)
    with pytest.raises(SpecError, match=r"^cell 3: %%distributed --profile multinode-ddp --strategy fsdp: --strategy "
                                        r"fsdp: profile 'multinode-ddp' .* locks strategy to ddp"):
        job_spec_from_header("--profile multinode-ddp --strategy fsdp", "cell 3")


def test_a_user_or_project_profile_cannot_replace_a_locked_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBTRAIN_CONFIG_DIR", str(tmp_path / "config"))
    (tmp_path / "config" / "profiles").mkdir(parents=True)
    # the built-in multinode-ddp locks the strategy; a user's copy without the lock would drop it
    (tmp_path / "config" / "profiles" / "multinode-ddp.toml").write_text(
        'version = "9"\n[options]\nstrategy = "fsdp"\n')
    project = tmp_path / "nbtrain.toml"
    project.write_text('[profiles.multinode-ddp]\nversion = "8"\n[profiles.multinode-ddp.options]\nnodes = 1\n')
    catalog = load_catalog(project)
    kept = catalog.get("multinode-ddp")
    assert kept.origin == "built-in" and "--strategy" in kept.locked
    assert len(catalog.problems) == 2 and all("cannot replace a locked one" in p for p in catalog.problems)
    assert "multinode-ddp.toml" in catalog.problems[0] and str(project) in catalog.problems[1]


def test_a_recorded_profile_keeps_its_locks_for_reruns() -> None:
    from nbtrain.profiles.apply import check_recorded_locks

    before = JobSpec(name="r", nodes=2, strategy="ddp")
    check_recorded_locks("multinode-ddp 1.0", before, JobSpec(name="r", nodes=1, strategy="ddp"))  # not locked
    with pytest.raises(SpecError, match=r"--strategy fsdp: profile 'multinode-ddp' \(version 1\.0"):
        check_recorded_locks("multinode-ddp 1.0", before, JobSpec(name="r", nodes=2, strategy="fsdp"))
    # a profile this machine does not have (in that version): nothing may change, since its locks are unknown
    check_recorded_locks("team-only 7", before, before)
    with pytest.raises(SpecError, match=r"--nodes: this run started from profile 'team-only' version 7, which is not"):
        check_recorded_locks("team-only 7", before, JobSpec(name="r", nodes=1, strategy="ddp"))
