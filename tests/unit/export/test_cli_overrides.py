"""`nbtrain submit` takes the %%distributed flags as overrides of nbtrain.toml."""

from __future__ import annotations

import pytest

from nbtrain import flags
from nbtrain.cli import apply_overrides, build_parser
from nbtrain.errors import SpecError
from nbtrain.magics.distributed import DistributedMagics
from nbtrain.spec import JobSpec


def test_every_job_flag_of_the_magic_is_an_override() -> None:
    magic = {s for a in DistributedMagics.distributed.parser._actions for s in a.option_strings}
    job_flags = {o.flag for o in flags.OPTIONS if o.field is not None}
    assert job_flags <= magic
    args = build_parser().parse_args(["submit", "DIR"])
    assert flags.given_options(args) == []
    for option in flags.options_for("magic", spec_only=True):
        assert option.surfaces == frozenset(flags.SURFACES), f"{option.flag} is not a `nbtrain submit` override"


def test_only_given_flags_override_and_dicts_merge() -> None:
    base = JobSpec(name="base", nodes=2, procs_per_node=4, env={"A": "1"}, image="img:1")
    parser = build_parser()
    args = parser.parse_args(["submit", "DIR", "--nodes", "1", "--env", "B=2", "--env", "A=3", "--strategy", "fsdp"])
    spec = apply_overrides(base, args)
    assert (spec.nodes, spec.procs_per_node, spec.image, spec.name) == (1, 4, "img:1", "base")
    assert spec.env == {"A": "3", "B": "2"} and spec.strategy.value == "fsdp"
    assert apply_overrides(base, parser.parse_args(["submit", "DIR"])) == base


def test_bad_override_names_the_flag() -> None:
    args = build_parser().parse_args(["submit", "DIR", "--device", "tpu"])
    with pytest.raises(SpecError, match="--device: unknown value 'tpu'"):
        apply_overrides(JobSpec(), args)


def test_manifests_takes_the_same_overrides() -> None:
    args = build_parser().parse_args(["manifests", "DIR", "--flavor", "jobset", "--namespace", "team-a"])
    spec = apply_overrides(JobSpec(backend="kubernetes"), args)
    assert (spec.flavor, spec.namespace) == ("jobset", "team-a")
