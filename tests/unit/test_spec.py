"""JobSpec: what a user types becomes a validated, immutable spec, or a SpecError they can act on."""

from __future__ import annotations

import dataclasses
import json

import pytest

from nbtrain.errors import NbtrainError, SpecError
from nbtrain.spec import Device, JobSpec, MixedPrecision, Strategy, slugify


def test_defaults_are_one_process_on_one_node() -> None:
    spec = JobSpec()
    assert (spec.nodes, spec.procs, spec.world_size) == (1, 1, 1)
    assert spec.device is Device.AUTO
    assert spec.strategy is Strategy.DDP
    assert spec.mixed_precision is MixedPrecision.NO


@pytest.mark.parametrize(
    ("nodes", "gpus", "procs", "world"),
    [(1, 1, 1, 1), (2, 2, 2, 4), (4, 8, 8, 32), (3, 0, 1, 3), (1, 0, 1, 1)],
)
def test_world_size_and_procs(nodes: int, gpus: int, procs: int, world: int) -> None:
    spec = JobSpec(nodes=nodes, procs_per_node=gpus)
    assert spec.procs == procs
    assert spec.world_size == world


@pytest.mark.parametrize(
    ("changes", "flag", "mentions"),
    [
        ({"nodes": 0}, "--nodes", ["0", "1 to 1024"]),
        ({"nodes": -3}, "--nodes", ["-3"]),
        ({"procs_per_node": -1}, "--gpus", ["-1", "0 to 64"]),
        ({"procs_per_node": 65}, "--gpus", ["65"]),
        ({"max_restarts": -1}, "--max-restarts", ["-1"]),
        ({"nodes": "2"}, "--nodes", ["whole number", "'2'"]),
        ({"nodes": 2.0}, "--nodes", ["whole number"]),
        ({"nodes": True}, "--nodes", ["whole number"]),
    ],
)
def test_bad_counts_name_the_flag_and_the_value(changes: dict[str, object], flag: str, mentions: list[str]) -> None:
    with pytest.raises(SpecError) as info:
        JobSpec(**changes)  # type: ignore[arg-type]
    message = str(info.value)
    assert message.startswith(flag + ":")
    for text in mentions:
        assert text in message


@pytest.mark.parametrize(
    ("field", "value", "flag", "allowed"),
    [
        ("strategy", "zero3", "--strategy", ["ddp", "fsdp", "deepspeed"]),
        ("device", "tpu", "--device", ["auto", "gpu", "cpu"]),
        ("mixed_precision", "fp4", "--mixed-precision", ["no", "fp16", "bf16", "fp8"]),
        ("backend", "ray", "--backend", ["local", "kubernetes", "slurm", "nbtrain.backends"]),  # and the fix
        ("flavor", "mpijob", "--flavor", ["job", "pytorchjob", "jobset"]),
    ],
)
def test_unknown_choice_lists_the_allowed_values(field: str, value: str, flag: str, allowed: list[str]) -> None:
    with pytest.raises(SpecError) as info:
        JobSpec(**{field: value})  # type: ignore[arg-type]
    message = str(info.value)
    assert message.startswith(flag + ":")
    assert repr(value) in message
    for choice in allowed:
        assert choice in message


def test_choices_accept_any_case_and_surrounding_spaces() -> None:
    spec = JobSpec(device=" GPU ", strategy="FSDP", mixed_precision="Bf16")  # type: ignore[arg-type]
    assert spec.device is Device.GPU
    assert spec.strategy is Strategy.FSDP
    assert spec.mixed_precision is MixedPrecision.BF16


def test_spec_error_is_a_value_error_and_an_nbtrain_error() -> None:
    with pytest.raises(ValueError):
        JobSpec(nodes=0)
    assert issubclass(SpecError, NbtrainError)


@pytest.mark.parametrize(
    ("changes", "flag"),
    [
        ({"name": ""}, "--name"),
        ({"name": "   "}, "--name"),
        ({"name": "x" * 101}, "--name"),
        ({"timeout_s": 0}, "--timeout"),
        ({"timeout_s": -5.0}, "--timeout"),
        ({"collective_timeout_s": 0}, "--collective-timeout"),
        ({"max_capture_mb": 0}, "--max-capture-mb"),
        ({"timeout_s": float("inf")}, "--timeout"),
        ({"timeout_s": 30 * 24 * 3600 + 1}, "--timeout"),
        ({"collective_timeout_s": float("nan")}, "--collective-timeout"),
        ({"collective_timeout_s": 1e300}, "--collective-timeout"),
        ({"max_capture_mb": float("inf")}, "--max-capture-mb"),
        ({"max_capture_mb": 10241}, "--max-capture-mb"),
        ({"timeout_s": "60"}, "--timeout"),
        ({"env": {"1BAD": "x"}}, "--env"),
        ({"env": {"OK": 3}}, "--env"),
    ],
)
def test_other_bad_values_name_their_flag(changes: dict[str, object], flag: str) -> None:
    with pytest.raises(SpecError, match=f"^{flag}:"):
        JobSpec(**changes)  # type: ignore[arg-type]


def test_spec_is_immutable_and_with_changes_revalidates() -> None:
    spec = JobSpec(nodes=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.nodes = 3  # type: ignore[misc]
    assert spec.with_changes(nodes=3).nodes == 3
    assert spec.nodes == 2
    with pytest.raises(SpecError, match="--nodes"):
        spec.with_changes(nodes=0)


def test_env_is_copied_so_later_edits_do_not_leak_into_the_spec() -> None:
    env = {"A": "1"}
    spec = JobSpec(env=env)
    env["B"] = "2"
    assert spec.env == {"A": "1"}


def _rich_spec() -> JobSpec:
    return JobSpec(
        name="Digits Run",
        nodes=2,
        procs_per_node=4,
        device="gpu",  # type: ignore[arg-type]
        strategy="deepspeed",  # type: ignore[arg-type]
        mixed_precision="bf16",  # type: ignore[arg-type]
        backend="kubernetes",
        image="ghcr.io/example/train:1",
        env={"WANDB_MODE": "offline"},
        checkpoint_dir="/ckpt",
        max_restarts=2,
        timeout_s=3600.0,
        collective_timeout_s=120.0,
        experiment="exp",
        namespace="ml",
        queue="team-a",
        flavor="jobset",
        node_selector={"gpu": "h100"},
        tolerations=({"key": "nvidia.com/gpu", "operator": "Exists"},),
        cpu="8",
        memory="64Gi",
    )


def test_to_dict_is_json_and_from_dict_round_trips() -> None:
    spec = _rich_spec()
    data = spec.to_dict()
    assert data["device"] == "gpu"
    assert data["strategy"] == "deepspeed"
    assert data["mixed_precision"] == "bf16"
    restored = JobSpec.from_dict(json.loads(json.dumps(data)))
    assert restored == spec
    assert restored.world_size == 8
    assert restored.tolerations == ({"key": "nvidia.com/gpu", "operator": "Exists"},)


def test_from_dict_ignores_keys_from_newer_versions_but_still_validates() -> None:
    data = JobSpec(nodes=3).to_dict()
    data["added_in_a_later_version"] = 42
    assert JobSpec.from_dict(data).nodes == 3
    data["strategy"] = "bogus"
    with pytest.raises(SpecError, match="--strategy"):
        JobSpec.from_dict(data)


@pytest.mark.parametrize(
    ("name", "slug"),
    [("Digits Run", "digits-run"), ("  --MNIST__v2!  ", "mnist-v2"), ("!!!", "run"), ("é", "run")],
)
def test_slug_is_a_dns_label_prefix(name: str, slug: str) -> None:
    assert slugify(name) == slug
    assert JobSpec(name=name).slug == slug


def test_long_names_give_slugs_of_at_most_40_characters_without_a_trailing_dash() -> None:
    slug = slugify("a" * 39 + "-" + "b" * 30)
    assert len(slug) <= 40
    assert not slug.endswith("-")


def test_number_limits_are_the_documented_maxima_and_old_records_load() -> None:
    from nbtrain.spec import NUMBER_LIMITS

    assert NUMBER_LIMITS == {"timeout_s": (0.0, 2592000.0), "collective_timeout_s": (0.0, 86400.0),
                             "max_capture_mb": (0.0, 10240.0), "stall_after_s": (0.0, 86400.0),
                             "hang_timeout_s": (0.0, 604800.0), "warm_ttl_s": (0.0, 604800.0)}
    top = JobSpec(timeout_s=2592000, collective_timeout_s=86400.0, max_capture_mb=10240.0)
    assert JobSpec.from_dict(json.loads(json.dumps(top.to_dict()))) == top
    old = JobSpec().to_dict()
    del old["oversubscribe"]  # a record written before --oversubscribe existed
    del old["stall_after_s"], old["hang_timeout_s"]  # ... and before the hang watchdog
    del old["warm"], old["warm_ttl_s"]  # ... and before warm gangs
    loaded = JobSpec.from_dict(old)
    assert loaded.oversubscribe is False and loaded.stall_after_s == 300.0 and loaded.hang_timeout_s is None
    assert loaded.warm is False and loaded.warm_ttl_s == 1800.0
