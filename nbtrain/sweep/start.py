"""Starting a sweep (the magic and the CLI call this): every trial's spec built and planned first, then the sweep
record saved and its supervisor started. A mistake found before the supervisor starts leaves no sweep behind."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from nbtrain.backends import get_backend
from nbtrain.errors import SpecError
from nbtrain.spec import JobSpec
from nbtrain.store import Store
from nbtrain.sweep.handle import Sweep
from nbtrain.sweep.record import SweepRecord, TrialEntry, new_sweep_id, save_sweep
from nbtrain.sweep.space import SweepSpec, expand
from nbtrain.sweep.supervisor import ensure_supervisor

__all__ = ["check_names", "plan_text", "start_sweep", "trial_specs"]


def check_names(spec: SweepSpec, known: Iterable[str], *, what: str) -> None:
    """SpecError naming the first ``--sweep-param`` that is not one of ``known`` parameters (``what``: where they
    come from, for the message)."""
    names = sorted(known)
    for name, _ in spec.params:
        if name not in names:
            listed = ", ".join(names) or "none"
            raise SpecError(f"--sweep-param {name}=...: {name!r} is not a parameter of {what}; parameters: {listed}. "
                            "A parameter is a plain value (a literal) the cell uses.")


def trial_specs(spec: SweepSpec, base: JobSpec, with_params: Callable[[JobSpec, Mapping[str, str]], JobSpec]
                ) -> list[tuple[dict[str, str], JobSpec]]:
    """Each trial's params and JobSpec: ``with_params(base, params)`` (the job's ``NBTRAIN_PARAMS``) named
    ``<name>-t<index>``. Raises SpecError for a value a parameter's type refuses."""
    out = []
    for index, params in enumerate(expand(spec)):
        try:
            trial = with_params(base, params)
        except SpecError as error:
            raise SpecError(f"--sweep-param: trial {index} ({_params_text(params)}): {error}") from None
        out.append((params, trial.with_changes(name=f"{base.name}-t{index}")))
    return out


def _params_text(params: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def plan_text(spec: SweepSpec, trials: list[tuple[dict[str, str], JobSpec]], first_plan: str) -> str:
    """What ``--dry-run`` prints for a sweep: the trials and the plan of the first one."""
    lines = [f"sweep: {spec.kind.value}, {len(trials)} trial(s), at most {spec.concurrency} at a time"
             + (f", objective {spec.objective} ({spec.mode.value})" if spec.objective else "")
             + (f", early stop: {spec.early_stop.value} after {spec.grace_steps} steps"
                if spec.early_stop.value != "none" else "")]
    lines += [f"  trial {i}: {_params_text(params)}" for i, (params, _) in enumerate(trials)]
    return "\n".join(lines) + "\n\nplan of trial 0:\n" + first_plan


def start_sweep(spec: SweepSpec, trials: list[tuple[dict[str, str], JobSpec]], *, name: str, bundle_digest: str,
                store: Store | None = None, kind: str = "cell", notebook: Mapping[str, Any] | None = None,
                profile: str | None = None) -> Sweep:
    """Plan every trial (the backend's checks; nothing runs), record the sweep and start its supervisor (a
    detached process: the sweep goes on without this process). The bundle must be in ``store`` already."""
    store = store or Store()
    store.ensure_writable()
    for index, (_, trial) in enumerate(trials):
        backend = get_backend(trial.backend, store=store)
        try:
            backend.plan(trial, str(store.bundles / bundle_digest), bundle_digest, f"{trial.slug}-dryrun")
        except SpecError as error:
            raise SpecError(f"sweep trial {index}: {error}") from None
    record = SweepRecord(sweep_id=new_sweep_id(store, name), spec=spec, bundle_digest=bundle_digest,
                         trials=[TrialEntry(i, params, trial) for i, (params, trial) in enumerate(trials)],
                         kind=kind, notebook=dict(notebook or {}), profile=profile)
    save_sweep(store, record)
    ensure_supervisor(store, record.sweep_id)
    return Sweep(record.sweep_id, store)
