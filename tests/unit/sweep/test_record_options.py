"""The sweep options as the magic and the CLI parse them, and the sweep record in the store."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbtrain import flags
from nbtrain.errors import RunNotFoundError, SpecError
from nbtrain.spec import JobSpec
from nbtrain.store import Store
from nbtrain.sweep.handle import Sweep
from nbtrain.sweep.options import sweep_from_namespace, sweep_given
from nbtrain.sweep.record import (
    SweepRecord,
    SweepState,
    TrialEntry,
    TrialState,
    load_sweep,
    new_sweep_id,
    save_sweep,
)
from nbtrain.sweep.space import Mode, SweepKind, parse_sweep
from nbtrain.sweep.start import check_names, trial_specs


@pytest.mark.parametrize("surface", ["magic", "cli"])
def test_both_surfaces_parse_the_sweep_options(surface: str) -> None:
    parser = flags.build_parser(surface)  # type: ignore[arg-type]
    args = parser.parse_args(["--sweep", "random", "--sweep-param", "lr=log:1e-4..1e-2", "--trials", "4",
                              "--objective", "acc", "--objective-mode", "max", "--concurrency", "3"])
    spec = sweep_from_namespace(args)
    assert spec is not None and spec.kind is SweepKind.RANDOM and spec.trials == 4 and spec.mode is Mode.MAX
    assert spec.concurrency == 3
    plain = parser.parse_args(["--nodes", "1"])
    assert sweep_given(plain) == [] and sweep_from_namespace(plain) is None


def test_a_lone_sweep_option_still_makes_a_sweep_that_names_what_it_lacks() -> None:
    args = flags.build_parser("magic").parse_args(["--seed", "0"])
    assert sweep_given(args) == ["--seed"]  # a zero is given, not "off": it is never parsed and ignored
    with pytest.raises(SpecError, match="--sweep-param NAME=VALUES"):
        sweep_from_namespace(args)


def test_trial_specs_name_each_trial_and_refuse_unknown_parameters() -> None:
    spec = parse_sweep(sweep=None, params=["lr=0.1,0.2"])
    trials = trial_specs(spec, JobSpec(name="demo"), lambda base, values: base.with_changes(
        env={**base.env, "NBTRAIN_PARAMS": str(dict(values))}))
    assert [(p, s.name, s.env["NBTRAIN_PARAMS"]) for p, s in trials] == [
        ({"lr": "0.1"}, "demo-t0", "{'lr': '0.1'}"), ({"lr": "0.2"}, "demo-t1", "{'lr': '0.2'}")]
    with pytest.raises(SpecError, match=r"--sweep-param lr=\.\.\.: 'lr' is not a parameter of the cell; "
                                        r"parameters: batch, width\."):
        check_names(spec, ["width", "batch"], what="the cell")


def test_the_record_round_trips_and_attach_resolves_a_prefix(tmp_path: Path) -> None:
    store = Store(tmp_path / "home")
    spec = parse_sweep(sweep=None, params=["lr=0.1,0.2"], objective="loss")
    record = SweepRecord(new_sweep_id(store, "demo"), spec, "d" * 64,
                         [TrialEntry(0, {"lr": "0.1"}, JobSpec(name="demo-t0"), run_id="demo-t0-abc",
                                     state=TrialState.STOPPED, stopped="objective loss 2 at step 3 is worse",
                                     objective=2.0),
                          TrialEntry(1, {"lr": "0.2"}, JobSpec(name="demo-t1"))], state=SweepState.RUNNING)
    save_sweep(store, record)
    again = load_sweep(store, record.sweep_id[:10])
    assert again.to_dict() == record.to_dict() and again.trials[0].state is TrialState.STOPPED
    sweep = Sweep(record.sweep_id[:10], store)
    assert sweep.id == record.sweep_id and sweep.state() is SweepState.RUNNING and sweep.best() is None
    text = sweep.summary()
    assert "trial 0: lr=0.1 -> demo-t0-abc stopped loss=2" in text
    assert "stopped early: objective loss 2 at step 3 is worse" in text
    with pytest.raises(RunNotFoundError, match="'nope' is no sweep in the store"):
        load_sweep(store, "nope")
