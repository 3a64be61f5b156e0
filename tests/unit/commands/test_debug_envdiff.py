"""Pure decisions of `nbtrain debug` (the debug spec) and `nbtrain env-diff` (what differs)."""

from __future__ import annotations

import argparse

import pytest

from nbtrain.commands.debug import debug_spec, overrides, register
from nbtrain.commands.envdiff import Difference, env_diff, render
from nbtrain.errors import SpecError
from nbtrain.spec import JobSpec


def test_debug_spec_is_one_node_two_cpu_processes_with_debugging_on() -> None:
    source = JobSpec(name="big", nodes=4, procs_per_node=8, device="gpu", env={"A": "1", "TORCH_DISTRIBUTED_DEBUG": "OFF"},
                     collective_timeout_s=1800, max_restarts=2)
    spec = debug_spec(source, gpus=False)
    assert (spec.nodes, spec.procs_per_node, spec.device.value, spec.max_restarts) == (1, 2, "cpu", 0)
    assert spec.env["TORCH_DISTRIBUTED_DEBUG"] == "DETAIL" and spec.env["PYTHONFAULTHANDLER"] == "1"
    assert spec.env["A"] == "1" and "NCCL_DEBUG" not in spec.env  # NCCL is not used on CPU
    assert (spec.collective_timeout_s, spec.hang_timeout_s, spec.stall_after_s) == (60.0, 120.0, 30.0)
    assert debug_spec(source, gpus=True).env["NCCL_DEBUG"] == "INFO"
    assert debug_spec(source.with_changes(collective_timeout_s=10), gpus=False).collective_timeout_s == 10


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["debug", "r1", *argv])


def test_typed_overrides_apply_after_the_debug_defaults() -> None:
    source = JobSpec(name="big", nodes=4, procs_per_node=8)
    spec = overrides(_parse("--nodes", "2", "--procs", "3", "--env", "TORCH_DISTRIBUTED_DEBUG=INFO"))(source)
    assert (spec.nodes, spec.procs_per_node, spec.env["TORCH_DISTRIBUTED_DEBUG"]) == (2, 3, "INFO")
    assert overrides(_parse("--device", "auto"))(source).env["NCCL_DEBUG"] == "INFO"
    with pytest.raises(SpecError, match="give one of them"):
        overrides(_parse("--procs", "3", "--gpus", "2"))


def test_env_diff_reports_versions_and_packages() -> None:
    here = {"python": "3.11.7", "torch": "2.5.0", "accelerate": "1.0", "packages": {"numpy": "2.0", "probe": "1.0"}}
    ranks = {0: {"python": "3.11.7", "torch": "2.5.0", "accelerate": "1.0", "device": "cpu",
                 "packages": {"numpy": "1.26"}},
             1: {"python": "3.11.7", "torch": "2.4.1", "accelerate": "1.0", "device": "cpu"}}
    differences = {d.what: d for d in env_diff(here, ranks)}
    assert set(differences) == {"torch", "package numpy", "package probe"}
    assert differences["torch"].line() == "torch: 2.5.0 here; 2.5.0 on rank 0; 2.4.1 on rank 1"
    assert differences["package probe"].line() == "package probe: 1.0 here; absent on rank 0"
    assert render([], run_id="r", ranks=2).startswith("r: the 2 rank(s) reported the same")


def test_env_diff_device_compares_ranks_only() -> None:
    same = {0: {"device": "cuda:0"}, 1: {"device": "cuda:0"}}
    assert env_diff({}, same) == []
    assert env_diff({}, {0: {"device": "cuda:0"}, 1: {"device": "cpu"}}) == [
        Difference("device", None, {0: "cuda:0", 1: "cpu"})]


def test_the_magic_parses_debug_env_diff_and_rerun_overrides() -> None:
    from nbtrain.flags import spec_from_namespace
    from nbtrain.magics.manage import _parser, usage

    args = _parser().parse_args(["debug", "r1", "--nodes", "1", "--procs", "4", "--out", "dbg"])
    assert args.magic is not None and args.out == "dbg"
    assert overrides(args)(JobSpec(nodes=3)).procs_per_node == 4
    assert _parser().parse_args(["env-diff", "r1"]).magic is not None
    rerun = _parser().parse_args(["rerun", "r1", "--nodes", "1", "--gpus", "2"])
    spec = spec_from_namespace(rerun, base=JobSpec(nodes=4, procs_per_node=8, env={"A": "1"}))
    assert (spec.nodes, spec.procs_per_node, spec.env) == (1, 2, {"A": "1"})
    assert "debug RUN" in usage() and "env-diff RUN" in usage()


def test_a_field_the_submitter_did_not_record_is_compared_between_ranks_only() -> None:
    ranks = {0: {"cuda": "12.1", "torch": "2.5.0"}, 1: {"cuda": "12.1", "torch": "2.5.0"}}
    assert env_diff({"torch": "2.5.0"}, ranks) == []  # no CUDA version recorded at submit: nothing to compare
    assert [d.what for d in env_diff({"torch": "2.5.0", "cuda": None}, ranks)] == ["cuda"]
