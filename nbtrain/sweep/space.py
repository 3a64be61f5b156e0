"""The sweep's spec and its trials (pure): what ``--sweep``, ``--sweep-param`` and the other sweep options mean.

A sweep runs the same job once per *trial*, each trial setting the job's parameters (the names ``--param`` and
exported jobs understand) to its own values, given as text exactly as ``--param NAME=TEXT`` would take them.

``--sweep-param NAME=VALUES`` (repeatable), VALUES one of:

- ``a,b,c``: these values (grid: every one; random: one drawn per trial);
- ``LOW..HIGH``: random only, uniform between LOW and HIGH (whole numbers when both are whole numbers);
- ``log:LOW..HIGH``: random only, log-uniform (LOW > 0).

``grid`` runs every combination, in the order the parameters were given (the last one varies fastest); ``random``
draws ``--trials`` combinations with ``--seed``.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from nbtrain.errors import SpecError

__all__ = ["Choice", "EarlyStop", "Mode", "Range", "SweepKind", "SweepSpec", "expand", "parse_sweep"]

MAX_TRIALS = 1000


class SweepKind(Enum):
    """How trials are chosen: every combination, or ``--trials`` random draws."""

    GRID = "grid"
    RANDOM = "random"


class Mode(Enum):
    """Whether a lower (min) or a higher (max) objective is better."""

    MIN = "min"
    MAX = "max"


class EarlyStop(Enum):
    """The early-stop rule: none, the median rule (:func:`nbtrain.sweep.policy.median_stops`) or ASHA-like rungs
    (:func:`nbtrain.sweep.policy.asha_stops`)."""

    NONE = "none"
    MEDIAN = "median"
    ASHA = "asha"


@dataclass(frozen=True)
class Choice:
    """A parameter's listed values (as ``--param`` text)."""

    values: tuple[str, ...]


@dataclass(frozen=True)
class Range:
    """A parameter drawn between ``low`` and ``high`` (random sweeps): log-uniform if ``log``, whole if ``integer``."""

    low: float
    high: float
    log: bool = False
    integer: bool = False


@dataclass(frozen=True)
class SweepSpec:
    """A parsed sweep: its kind, each parameter's values, the objective and how trials run and stop."""

    kind: SweepKind
    params: tuple[tuple[str, Choice | Range], ...]
    trials: int | None = None  # random: how many
    seed: int = 0
    objective: str | None = None
    mode: Mode = Mode.MIN
    concurrency: int = 1
    early_stop: EarlyStop = EarlyStop.NONE
    grace_steps: int = 3

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the sweep record); :meth:`from_dict` reads it back."""
        params = [[name, {"values": list(v.values)} if isinstance(v, Choice) else
                   {"low": v.low, "high": v.high, "log": v.log, "integer": v.integer}] for name, v in self.params]
        return {"kind": self.kind.value, "params": params, "trials": self.trials, "seed": self.seed,
                "objective": self.objective, "mode": self.mode.value, "concurrency": self.concurrency,
                "early_stop": self.early_stop.value, "grace_steps": self.grace_steps}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepSpec:
        """Inverse of :meth:`to_dict`."""
        params = tuple((str(name), Choice(tuple(v["values"])) if "values" in v else
                        Range(float(v["low"]), float(v["high"]), bool(v["log"]), bool(v["integer"])))
                       for name, v in data["params"])
        return cls(SweepKind(data["kind"]), params, data.get("trials"), int(data.get("seed", 0)), data.get("objective"),
                   Mode(data.get("mode", "min")), int(data.get("concurrency", 1)),
                   EarlyStop(data.get("early_stop", "none")), int(data.get("grace_steps", 3)))


def _number(text: str, flag: str, item: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SpecError(f"{flag} {item!r}: {text!r} is not a number; write a range as LOW..HIGH, e.g. lr=1e-4..1e-2."
                        ) from None
    if not math.isfinite(value):
        raise SpecError(f"{flag} {item!r}: {text!r} is not a finite number.")
    return value


def _values(item: str, kind: SweepKind) -> tuple[str, Choice | Range]:
    flag = "--sweep-param"
    name, sep, text = item.partition("=")
    name = name.strip()
    if not sep or not name.isidentifier() or not text.strip():
        raise SpecError(f"{flag} {item!r}: write it as NAME=VALUES, e.g. {flag} lr=1e-3,1e-2 (values) or "
                        f"{flag} lr=log:1e-4..1e-2 (a range, --sweep random).")
    body = text.strip()
    log = body.startswith("log:")
    if log or ".." in body:
        if kind is SweepKind.GRID:
            raise SpecError(f"{flag} {item!r}: a range has no grid; list the values (e.g. {name}=1e-4,1e-3,1e-2) or "
                            "use --sweep random.")
        low_text, dots, high_text = body.removeprefix("log:").partition("..")
        if not dots:
            raise SpecError(f"{flag} {item!r}: write a log range as log:LOW..HIGH, e.g. {name}=log:1e-4..1e-2.")
        low, high = _number(low_text, flag, item), _number(high_text, flag, item)
        if not low < high or (log and low <= 0):
            raise SpecError(f"{flag} {item!r}: the range needs LOW < HIGH{' and LOW > 0 (log)' if log else ''}.")
        whole = not log and low.is_integer() and high.is_integer() and "." not in low_text + high_text
        return name, Range(low, high, log=log, integer=whole)
    values = tuple(v.strip() for v in body.split(","))
    if any(not v for v in values) or len(set(values)) != len(values):
        raise SpecError(f"{flag} {item!r}: the values must be distinct and non-empty, e.g. {name}=16,32,64.")
    return name, Choice(values)


def _positive(flag: str, value: Any, lowest: int, fix: str) -> int:
    if value is None:
        return lowest
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise SpecError(f"{flag} {value!r}: must be a whole number >= {lowest}; {fix}.")
    return value


def _enum(enum: Any, flag: str, value: str | None, default: Any) -> Any:
    if value is None:
        return default
    try:
        return enum(str(value).strip().lower())
    except ValueError:
        allowed = ", ".join(e.value for e in enum)
        raise SpecError(f"{flag} {value!r}: not one of {allowed}.") from None


def parse_sweep(*, sweep: str | None, params: Sequence[str], trials: int | None = None, seed: int | None = None,
                objective: str | None = None, objective_mode: str | None = None, concurrency: int | None = None,
                early_stop: str | None = None, grace_steps: int | None = None) -> SweepSpec:
    """The :class:`SweepSpec` of the sweep options as typed (None: not given). Raises :class:`SpecError` naming the
    option, the value and the fix. ``--sweep`` defaults to grid; ``--early-stop`` to median when there is an
    ``--objective`` (there is nothing to compare without one)."""
    kind = _enum(SweepKind, "--sweep", sweep, SweepKind.GRID)
    if not params:
        raise SpecError("--sweep: a sweep needs the parameters it varies: add --sweep-param NAME=VALUES, e.g. "
                        "--sweep-param lr=1e-3,1e-2 (NAME: a value the cell uses, as --param takes it).")
    parsed = [_values(item, kind) for item in params]
    names = [name for name, _ in parsed]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise SpecError(f"--sweep-param {twice[0]}: given twice; give each parameter once with all its values.")
    if kind is SweepKind.GRID and trials is not None:
        raise SpecError(f"--trials {trials}: a grid runs every combination; drop --trials or use --sweep random.")
    if kind is SweepKind.RANDOM and trials is None:
        raise SpecError("--sweep random: say how many trials to draw with --trials N, e.g. --trials 8.")
    count = _positive("--trials", trials, 1, f"at most {MAX_TRIALS}") if trials is not None else None
    mode = _enum(Mode, "--objective-mode", objective_mode, Mode.MIN)
    if objective is not None and not objective.strip():
        raise SpecError("--objective '': name the metric the cell reports, e.g. --objective loss.")
    stop = _enum(EarlyStop, "--early-stop", early_stop, EarlyStop.MEDIAN if objective else EarlyStop.NONE)
    if stop is not EarlyStop.NONE and not objective:
        raise SpecError(f"--early-stop {stop.value}: early stopping compares an objective; add --objective METRIC "
                        "(a metric the cell reports, e.g. loss) or drop --early-stop.")
    spec = SweepSpec(kind, tuple(parsed), count, seed if seed is not None else 0, objective.strip() if objective else None,
                     mode, _positive("--concurrency", concurrency, 1, "it is how many trials run at once"), stop,
                     _positive("--grace-steps", grace_steps, 1, "trials are not stopped before this step") if
                     grace_steps is not None else 3)
    total = len(expand(spec)) if kind is SweepKind.GRID else count or 0
    if total > MAX_TRIALS:
        raise SpecError(f"--sweep-param: {total} trials; at most {MAX_TRIALS}. List fewer values or use --sweep random "
                        "with --trials N.")
    return spec


def _draw(value: Choice | Range, rng: random.Random) -> str:
    if isinstance(value, Choice):
        return rng.choice(value.values)
    if value.integer:
        return str(rng.randint(int(value.low), int(value.high)))
    if value.log:
        return f"{math.exp(rng.uniform(math.log(value.low), math.log(value.high))):.6g}"
    return f"{rng.uniform(value.low, value.high):.6g}"


def expand(spec: SweepSpec) -> list[dict[str, str]]:
    """The trials of ``spec``: one ``{NAME: TEXT}`` per trial, in the order they are run.

    Grid: every combination (the last parameter varies fastest). Random: ``trials`` draws from ``Random(seed)``
    (the same seed gives the same trials).
    """
    names = [name for name, _ in spec.params]
    if spec.kind is SweepKind.GRID:
        lists = [v.values for _, v in spec.params if isinstance(v, Choice)]
        return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*lists)]
    rng = random.Random(spec.seed)
    return [{name: _draw(value, rng) for name, value in spec.params} for _ in range(spec.trials or 0)]
