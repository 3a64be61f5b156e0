"""The sweep's pure parts: options -> SweepSpec (errors name the option, the value and the fix), trials, the median
rule and the best trial."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbtrain.errors import SpecError
from nbtrain.sweep.policy import TrialProgress, best_trial, median_stops
from nbtrain.sweep.space import Choice, EarlyStop, Mode, Range, SweepKind, SweepSpec, expand, parse_sweep


def test_grid_expands_every_combination_last_parameter_fastest() -> None:
    spec = parse_sweep(sweep=None, params=["lr=0.1,0.01", "width=8,16,32"], concurrency=2)
    assert spec.kind is SweepKind.GRID and spec.concurrency == 2 and spec.early_stop is EarlyStop.NONE
    assert expand(spec) == [{"lr": "0.1", "width": w} for w in ("8", "16", "32")] + \
        [{"lr": "0.01", "width": w} for w in ("8", "16", "32")]


def test_objective_turns_the_median_rule_on_and_spec_round_trips() -> None:
    spec = parse_sweep(sweep="random", params=["lr=log:1e-4..1e-2", "bs=16..64", "opt=adam,sgd"], trials=5, seed=7,
                       objective="loss", objective_mode="MAX", grace_steps=2)
    assert spec.early_stop is EarlyStop.MEDIAN and spec.mode is Mode.MAX and spec.grace_steps == 2
    assert dict(spec.params)["bs"] == Range(16, 64, integer=True)
    assert SweepSpec.from_dict(spec.to_dict()) == spec
    trials = expand(spec)
    assert trials == expand(spec) and len(trials) == 5  # the same seed draws the same trials
    for trial in trials:
        assert 1e-4 <= float(trial["lr"]) <= 1e-2 and 16 <= int(trial["bs"]) <= 64 and trial["opt"] in ("adam", "sgd")


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"params": []}, "--sweep-param NAME=VALUES"),
    ({"params": ["lr"]}, "--sweep-param 'lr': write it as NAME=VALUES"),
    ({"params": ["lr=1e-4..1e-2"]}, "a range has no grid"),
    ({"params": ["lr=1,1"]}, "distinct"),
    ({"params": ["lr=1", "lr=2"]}, "--sweep-param lr: given twice"),
    ({"params": ["lr=1"], "trials": 3}, "--trials 3: a grid runs every combination"),
    ({"params": ["lr=1..x"], "sweep": "random", "trials": 2}, "'x' is not a number"),
    ({"params": ["lr=log:0..1"], "sweep": "random", "trials": 2}, "LOW > 0"),
    ({"params": ["lr=1"], "sweep": "random"}, "--trials N"),
    ({"params": ["lr=1"], "sweep": "bayes"}, "--sweep 'bayes': not one of grid, random"),
    ({"params": ["lr=1"], "concurrency": 0}, "--concurrency 0: must be a whole number >= 1"),
    ({"params": ["lr=1"], "early_stop": "median"}, "add --objective METRIC"),
    ({"params": ["lr=1"], "objective": "loss", "objective_mode": "up"}, "--objective-mode 'up': not one of min, max"),
])
def test_bad_options_are_named_with_their_fix(kwargs: dict, says: str) -> None:
    kwargs = {"sweep": None, **kwargs}
    with pytest.raises(SpecError, match=None) as error:
        parse_sweep(**kwargs)
    assert says in str(error.value)


def test_too_many_trials_are_refused() -> None:
    with pytest.raises(SpecError, match="at most 1000"):
        parse_sweep(sweep=None, params=[f"p{i}=" + ",".join(map(str, range(10))) for i in range(4)])


@given(st.lists(st.lists(st.integers(0, 99), min_size=1, max_size=4, unique=True), min_size=1, max_size=3))
def test_grid_size_is_the_product_and_trials_are_distinct(values: list[list[int]]) -> None:
    spec = SweepSpec(SweepKind.GRID, tuple((f"p{i}", Choice(tuple(map(str, v)))) for i, v in enumerate(values)))
    trials = expand(spec)
    size = 1
    for v in values:
        size *= len(v)
    assert len(trials) == size and len({tuple(sorted(t.items())) for t in trials}) == size


def _trial(index: int, values: list[float], *, running: bool = False) -> TrialProgress:
    return TrialProgress(index, running=running, completed=not running,
                         points=tuple((step, v) for step, v in enumerate(values, start=1)))


def test_median_rule_stops_a_trial_behind_the_completed_ones_and_says_why() -> None:
    done = [_trial(0, [1.0, 0.8, 0.6, 0.5]), _trial(1, [1.2, 0.9, 0.7, 0.6]), _trial(2, [1.1, 1.0, 0.9, 0.8])]
    bad = _trial(3, [2.5, 2.4, 2.31], running=True)
    good = _trial(4, [0.9, 0.7, 0.6], running=True)
    stops = median_stops([*done, bad, good], objective="loss", mode=Mode.MIN, grace_steps=3)
    assert [s.index for s in stops] == [3]
    assert stops[0].reason.startswith("objective loss 2.31 at step 3 is worse than the median 0.7 of 3 completed "
                                      "trials at step 3")


def test_median_rule_waits_for_the_grace_period_and_a_completed_trial() -> None:
    bad_early = _trial(1, [9.0, 9.0], running=True)
    assert median_stops([_trial(0, [1.0, 1.0, 1.0]), bad_early], objective="loss", mode=Mode.MIN, grace_steps=3) == []
    alone = [_trial(0, [9.0, 9.0, 9.0], running=True), _trial(1, [1.0, 1.0, 1.0], running=True)]
    assert median_stops(alone, objective="loss", mode=Mode.MIN, grace_steps=1) == []


def test_median_rule_in_max_mode_and_best_trial() -> None:
    trials = [_trial(0, [0.5, 0.9]), _trial(1, [0.4, 0.95]), _trial(2, [0.1, 0.2], running=True)]
    assert [s.index for s in median_stops(trials, objective="acc", mode=Mode.MAX, grace_steps=2)] == [2]
    assert best_trial(trials, Mode.MAX) == (1, 0.95)
    assert best_trial(trials, Mode.MIN) == (0, 0.9)
    assert best_trial([_trial(0, [1.0], running=True)], Mode.MIN) is None


def test_asha_stops_a_trial_outside_the_best_third_at_its_rung_and_says_why() -> None:
    from nbtrain.sweep.policy import asha_stops

    # rungs at steps 2, 6, 18; six trials reached step 2, the running ones are judged there
    trials = [_trial(0, [1.0, 0.9, 0.8]), _trial(1, [1.0, 0.8, 0.7]), _trial(2, [1.0, 0.7, 0.6]),
              _trial(3, [1.0, 0.6], running=True), _trial(4, [3.0, 2.5], running=True),
              _trial(5, [1.0, 0.85], running=True)]
    stops = asha_stops(trials, objective="loss", mode=Mode.MIN, grace_steps=2)
    assert [s.index for s in stops] == [4, 5]
    assert stops[0].reason.startswith("objective loss 2.5 at rung step 2 is not in the best 2 of the 6 trials that "
                                      "reached step 2 (cutoff 0.7;")
    # below the first rung, or with fewer than `reduction` trials at the rung, nothing is judged
    assert asha_stops([trials[0], _trial(9, [9.0, 9.0], running=True)], objective="loss", mode=Mode.MIN,
                      grace_steps=2) == []
    assert asha_stops([_trial(0, [1.0]), _trial(1, [9.0], running=True)], objective="loss", mode=Mode.MIN,
                      grace_steps=2) == []


def test_asha_in_max_mode_judges_at_the_highest_rung_reached() -> None:
    from nbtrain.sweep.policy import asha_stops

    done = [_trial(i, [0.1 * i] * 3) for i in range(1, 4)]  # reached rung 3 with accuracy 0.1, 0.2, 0.3
    low = _trial(7, [0.05, 0.05, 0.05], running=True)
    assert [s.index for s in asha_stops([*done, low], objective="acc", mode=Mode.MAX, grace_steps=1)] == [7]
    assert asha_stops([*done, _trial(8, [0.5] * 3, running=True)], objective="acc", mode=Mode.MAX,
                      grace_steps=1) == []
    assert parse_sweep(sweep=None, params=["lr=1"], objective="acc", early_stop="ASHA").early_stop is EarlyStop.ASHA
