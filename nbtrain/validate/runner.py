"""Run the ladder of :mod:`nbtrain.validate.ladder` on a job directory (the I/O: processes, gangs, files).

Every run is a real local gang on CPU (the platform's launcher, accelerate, gloo) bounded by the step budget
``NBTRAIN_MAX_STEPS`` (see :mod:`nbtrain.runtime.metrics`) and a wall-clock timeout; its failure report
(``run.failure``) names the rank and the reason of a failed rung.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbtrain.errors import BackendError, EnvironmentProblem, NbtrainError, SpecError
from nbtrain.spec import JobSpec
from nbtrain.validate.ladder import LADDER, Blame, Outcome, Rung, blame_of_failure, skip_reason

if TYPE_CHECKING:
    from nbtrain.profiles.model import Profile

__all__ = ["Settings", "absolute_paths", "local_spec", "validate_job"]

ENV_MAX_STEPS = "NBTRAIN_MAX_STEPS"  # nbtrain.runtime.metrics.ENV_MAX_STEPS (runtime/ is not imported here)
ENV_UNTIL_CHECKPOINT = "NBTRAIN_MAX_STEPS_UNTIL_CHECKPOINT"  # nbtrain.runtime.metrics.ENV_UNTIL_CHECKPOINT


@dataclass(frozen=True)
class Settings:
    """The budget: ``steps`` per run, ``procs`` of the distributed rung, ``timeout_s`` per run."""

    steps: int = 10
    procs: int = 2
    timeout_s: float = 300.0


@dataclass
class _State:
    directory: Path
    settings: Settings
    job: Any = None
    spec: JobSpec | None = None
    distributed: Any = None  # the Run of the distributed rung (checkpoint and resume use it)
    checkpoint: dict[str, Any] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)
    profile: Any = None  # the Profile of --profile NAME, whose locks the job must meet


def local_spec(spec: JobSpec, procs: int, steps: int, timeout_s: float, *, until_checkpoint: bool = False) -> JobSpec:
    """``spec`` as a small local CPU gang (1 node x ``procs``) stopped after ``steps`` steps (pure); with
    ``until_checkpoint``, after the job's first checkpoint when it has saved none by then (the distributed rung).

    Options the local backend does not honour (Kubernetes, Slurm) go back to their defaults: validation
    runs the job's code, not its cluster placement. No restarts, no MLflow, no warm gang.
    """
    from nbtrain.flags.table import OPTIONS

    changes: dict[str, Any] = {}
    for option in OPTIONS:
        if option.field and option.backends is not None and "local" not in option.backends:
            changes[option.field] = option.default
    changes.update(backend="local", nodes=1, procs_per_node=procs, device="cpu", max_restarts=0, tracking=False,
                   warm=False, timeout_s=timeout_s, env={**spec.env, ENV_MAX_STEPS: str(steps),
                                                         **({ENV_UNTIL_CHECKPOINT: "1"} if until_checkpoint else {})})
    return spec.with_changes(**changes)


def absolute_paths(values: Mapping[str, str]) -> dict[str, str]:
    """The values of ``values`` that are absolute paths (``/data/x``, ``file:///data/x``): NAME -> path (pure)."""
    found = {}
    for name, value in values.items():
        text = str(value)
        if text.startswith("file://"):
            text = text[len("file://"):]
        if text.startswith("/") and "\n" not in text:
            found[name] = text
    return found


def validate_job(directory: Path, settings: Settings, *, report: Callable[[Outcome], None] | None = None,
                 profile: Profile | None = None) -> list[Outcome]:
    """Run every rung of the ladder on the job directory ``directory``; ``report`` sees each outcome as it comes.

    The config rung also checks the job against ``profile``'s locks (``--profile NAME``), else against those of
    the profile the job records (``[source] profile``, as ``nbtrain submit`` would): a locked option the job
    sets otherwise fails it, naming the option, the job's value and the locked one.
    """
    state = _State(Path(directory), settings, profile=profile)
    done: dict[Rung, Outcome] = {}
    for rung in LADDER:
        started = time.monotonic()
        reason = skip_reason(rung, done)
        if reason is not None:
            outcome = Outcome.skipped(rung, reason)
        else:
            try:
                outcome = _RUNGS[rung](state)
            except SpecError as error:
                outcome = Outcome.failed(rung, str(error), Blame.JOB)
            except (EnvironmentProblem, BackendError, OSError) as error:
                outcome = Outcome.failed(rung, f"{type(error).__name__}: {error}", Blame.PLATFORM)
            except NbtrainError as error:
                outcome = Outcome.failed(rung, str(error), Blame.JOB)
            outcome = Outcome(outcome.rung, outcome.status, outcome.message, outcome.blame,
                              time.monotonic() - started, outcome.output)
        done[rung] = outcome
        if report is not None:
            report(outcome)
    return list(done.values())


# ------------------------------------------------------------------------------------------------ rungs


def _config(state: _State) -> Outcome:
    from nbtrain.export.jobdir import load_job
    from nbtrain.flags.support import unsupported_options

    state.job = load_job(state.directory)
    spec = state.job.with_parameters(state.job.spec, {})
    problems = unsupported_options(spec, spec.backend)
    if problems:
        return Outcome.failed(Rung.CONFIG, f"nbtrain.toml: {problems[0]}", Blame.JOB)
    locks = _locks(state)
    if isinstance(locks, Outcome):
        return locks
    state.spec = spec
    notes = [f"{spec.nodes} node(s) x {spec.procs_per_node} process(es) on {spec.backend}", *locks]
    notes.extend(_export_checks(spec, state.job.bundle))
    return Outcome.passed(Rung.CONFIG, "; ".join(notes))


def _locks(state: _State) -> Outcome | list[str]:
    """The config rung's profile check: a failed Outcome, or the note saying which profile's locks the job meets."""
    from nbtrain.profiles.load import load_catalog
    from nbtrain.profiles.locks import installed_profile, lock_mismatches

    profile, toml = state.profile, state.directory / "nbtrain.toml"
    recorded = state.job.profile
    if profile is None and recorded:
        installed = load_catalog(toml).profiles
        where = f"nbtrain.toml ([source] profile = {recorded!r})"
        try:
            profile = installed_profile(recorded, installed, where)
        except SpecError as error:  # not installed here: the platform's kit is missing; another version: re-export
            blame = Blame.PLATFORM if recorded.partition(" ")[0] not in installed else Blame.JOB
            return Outcome.failed(Rung.CONFIG, str(error), blame)
    if profile is None:
        return []
    mismatches = lock_mismatches(profile, state.job.spec)
    if mismatches:
        return Outcome.failed(Rung.CONFIG, "nbtrain.toml: " + "; ".join(m.describe(profile) for m in mismatches)
                              + f" (ask {profile.who_to_ask()} to change a lock)", Blame.JOB)
    locked = ", ".join(sorted(profile.locked)) or "none"
    return [f"meets the locks of profile {profile.label} ({locked})"]


def _export_checks(spec: JobSpec, bundle: Any) -> list[str]:
    """Each backend's own check of the exported job (:meth:`Backend.check_export`), as notes for the config rung.

    The export always holds Kubernetes manifests, so the kubernetes backend checks them (rendered and schema-checked)
    whatever the job's backend; the job's own backend checks what it would run. Raises SpecError for what the job's
    own backend refuses; a missing kubernetes backend, and options Kubernetes would refuse, fail only a job that runs
    there (another job's note says why its manifests were not checked).
    """
    from nbtrain.backends import get_backend

    notes = [_kubernetes_check(spec, bundle)]
    if spec.backend != "kubernetes":
        own = get_backend(spec.backend).check_export(spec, bundle)
        if own:
            notes.append(own)
    return notes


def _kubernetes_check(spec: JobSpec, bundle: Any) -> str:
    """The kubernetes backend's :meth:`check_export` of ``spec``, or the note saying why it was not checked."""
    from nbtrain.backends import get_backend

    on_kubernetes = spec.backend == "kubernetes"
    try:
        backend = get_backend("kubernetes")
    except NbtrainError as error:
        if on_kubernetes:
            raise EnvironmentProblem(f"the kubernetes backend is not available in this installation ({error})") from None
        return f"kubernetes manifests not checked (the kubernetes backend is not available: {error})"
    try:
        return backend.check_export(spec, bundle) or "kubernetes manifests: nothing to check"
    except SpecError as error:
        if not on_kubernetes:  # e.g. --max-restarts without --volume: fine where the job runs
            return f"kubernetes manifests not checked: its options do not run there as they are ({error})"
        message = str(error)
        raise SpecError(message if message.startswith("kubernetes manifests") else f"kubernetes manifests: {message}"
                        ) from None


def _imports(state: _State) -> Outcome:
    from nbtrain.validate.imports import blame_of_imports, check_imports

    source = (state.directory / "train.py").read_text(encoding="utf-8")
    results = check_imports(source, cwd=str(state.directory), timeout_s=state.settings.timeout_s)
    errors = {module: error for module, error in results.items() if error}
    if not errors:
        return Outcome.passed(Rung.IMPORTS, f"{len(results)} module(s) import")
    requirements_file = state.directory / "requirements.txt"
    requirements = requirements_file.read_text(encoding="utf-8").splitlines() if requirements_file.is_file() else []
    blame, message = blame_of_imports(errors, [r for r in requirements if r and not r.startswith("#")])
    return Outcome.failed(Rung.IMPORTS, message, blame)


def _paths(state: _State) -> Outcome:
    assert state.spec is not None
    spec = state.spec
    notes = []
    for name, path in absolute_paths(dict(spec.env)).items():
        if not os.path.exists(path):
            return Outcome.failed(Rung.PATHS, f"--env {name}={path}: no such file or directory on this machine; "
                                  "mount it here or point the variable at a path this machine has", Blame.JOB)
        if not os.access(path, os.R_OK):
            return Outcome.failed(Rung.PATHS, f"--env {name}={path}: not readable by this user; fix its "
                                  "permissions", Blame.JOB)
        notes.append(f"{name} readable")
    from nbtrain.store import Store

    configured = spec.checkpoint_dir is not None
    store = Store()
    if configured:
        return _checkpoints_writable(str(spec.checkpoint_dir), store, notes)
    root = store.root / "runs"
    try:
        store.ensure_writable()  # creates the store private (0700), as a first run would
        with tempfile.NamedTemporaryFile(dir=root, prefix=".nbtrain-validate-"):
            pass
    except OSError as error:
        return Outcome.failed(Rung.PATHS, f"the run store {root} is not writable ({error.strerror}); fix its "
                              "permissions or set NBTRAIN_HOME to a directory this user owns", Blame.PLATFORM)
    notes.append(f"checkpoints writable under {root}")
    return Outcome.passed(Rung.PATHS, "; ".join(notes))


def _checkpoints_writable(checkpoint_dir: str, store: Any, notes: list[str]) -> Outcome:
    """The paths rung for ``--checkpoint-dir``: a local directory (created) or an fsspec URL (``s3://…``, or
    ``checkpoint://`` through the configured roots) where a probe object is written and removed again."""
    from nbtrain.secrets import redact_url
    from nbtrain.storage.checkpoints import run_checkpoint_root
    from nbtrain.storage.fs import filesystem
    from nbtrain.storage.uris import local_path

    probe = f".nbtrain-validate-{os.getpid()}-{int(time.time() * 1000)}"
    try:
        target = run_checkpoint_root(checkpoint_dir, probe, default=store.root / "runs")
    except NbtrainError as error:
        return Outcome.failed(Rung.PATHS, f"--checkpoint-dir {checkpoint_dir}: {error}", Blame.JOB)
    local = local_path(target)
    try:
        if local is not None:
            root = Path(local).parent
            root.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=root, prefix=".nbtrain-validate-"):
                pass
            shown = str(root)
        else:
            fs, path = filesystem(target)
            fs.pipe_file(path, b"nbtrain validate probe\n")
            fs.rm_file(path)
            shown = redact_url(target.rsplit("/", 1)[0])
    except OSError as error:
        reason = error.strerror or str(error) or type(error).__name__
        return Outcome.failed(Rung.PATHS, f"--checkpoint-dir {redact_url(checkpoint_dir)} is not writable ({reason}); "
                              "fix its permissions or credentials, or choose another location", Blame.JOB)
    notes.append(f"checkpoints writable under {shown}")
    return Outcome.passed(Rung.PATHS, "; ".join(notes))


def _gang(state: _State, rung: Rung, procs: int) -> tuple[Outcome, Any]:
    """Submit the job as a 1 x ``procs`` local gang for the step budget; wait; the outcome and the Run.

    The distributed rung of a job that saves checkpoints (its code calls ``save_checkpoint``) runs on past the
    budget to the first one, so that the checkpoint and resume rungs have one; when none comes within the time
    limit, the run is stopped there and those rungs are skipped, saying so.
    """
    from nbtrain import client

    assert state.spec is not None and state.job is not None
    settings = state.settings
    until = rung is Rung.DISTRIBUTED and _saves_checkpoints(state.directory)
    # with ``until``, the run's own limit is a margin above the wait, so that the wait decides (see _finished)
    spec = local_spec(state.spec, procs, settings.steps, settings.timeout_s + (60 if until else 0),
                      until_checkpoint=until)
    run = client.submit_bundle(state.job.bundle, spec, notebook={"job_dir": str(state.directory.resolve()),
                                                                  "validate": rung.value})
    state.runs.append(run.id)
    return _finished(rung, run, settings, until_checkpoint=until), run


def _saves_checkpoints(directory: Path) -> bool:
    """Whether the job's code calls ``save_checkpoint`` (nbtrain's; its cadence is the code's to decide)."""
    try:
        return "save_checkpoint(" in (directory / "train.py").read_text(encoding="utf-8")
    except OSError:
        return False


def _finished(rung: Rung, run: Any, settings: Settings, *, until_checkpoint: bool = False) -> Outcome:
    try:
        state = run.wait(timeout=settings.timeout_s + (0 if until_checkpoint else 60), raise_on_failure=False,
                         progress=False)
    except TimeoutError:
        steps = _steps(run, run.record.attempts[-1]["attempt"] if run.record.attempts else 0)
        if until_checkpoint and len(steps) >= settings.steps and run.failure is None and not run.checkpoints():
            run.cancel()  # no checkpoint within the limit: the N steps ran; checkpoint and resume say why they skip
            return Outcome.passed(rung, f"run {run.id}: {len(steps)} step(s) reported; no checkpoint within "
                                        f"{settings.timeout_s:.0f} s, stopped there")
        run.cancel()
        return Outcome.failed(rung, f"run {run.id} did not end within {settings.timeout_s:.0f} s; its steps are "
                              f"too slow for the budget or it reports none (accelerator.log / nbtrain.log)", Blame.JOB)
    if state.value == "succeeded":
        steps = _steps(run, run.record.latest_attempt)
        what = f"{len(steps)} step(s) reported" if steps else "no steps reported: the job ran to its end"
        if until_checkpoint and len(steps) > settings.steps and run.checkpoints():
            what += f", on to its first checkpoint (step {run.checkpoints()[0]['step']})"
        return Outcome.passed(rung, f"run {run.id}: {what}")
    failure = run.failure
    if state.value == "cancelled":
        return Outcome.failed(rung, f"run {run.id} was cancelled", Blame.PLATFORM)
    summary = failure.summary() if failure is not None else "no failure report"
    output = (failure.traceback or "\n".join(failure.last_lines)) if failure is not None else ""
    return Outcome.failed(rung, f"run {run.id}: {summary}", blame_of_failure(failure), output=output or "")


def _steps(run: Any, attempt: int) -> list[int]:
    """The steps rank 0 reported in ``attempt`` of ``run``, in order."""
    return [int(e.data["step"]) for e in run.events()
            if e.kind.value == "metric" and e.rank == 0 and e.attempt == attempt]


def _single(state: _State) -> Outcome:
    return _gang(state, Rung.SINGLE, 1)[0]


def _distributed(state: _State) -> Outcome:
    outcome, run = _gang(state, Rung.DISTRIBUTED, state.settings.procs)
    state.distributed = run
    return outcome


def _checkpoint(state: _State) -> Outcome:
    from nbtrain.validate.checkpoints import load_checkpoint_files

    run = state.distributed
    saved = run.checkpoints()
    if not saved:
        if not _saves_checkpoints(state.directory):
            return Outcome.skipped(Rung.CHECKPOINT, "the job saves no checkpoints (its code never calls "
                                   "nbtrain.save_checkpoint(accelerator, step))")
        return Outcome.skipped(Rung.CHECKPOINT, f"the job saved no checkpoint within {state.settings.timeout_s:.0f} s "
                               f"(--timeout); raise it if the job saves less often")
    latest = saved[-1]
    loaded = load_checkpoint_files(Path(str(latest["path"]))) if _is_local(str(latest["path"])) \
        else _load_remote_checkpoint(str(latest["path"]))
    state.checkpoint = dict(latest)
    return Outcome.passed(Rung.CHECKPOINT, f"step {latest['step']} ({latest['path']}): {loaded}")


def _is_local(path: str) -> bool:
    from nbtrain.storage.uris import is_remote

    return not is_remote(path)


def _load_remote_checkpoint(url: str) -> str:
    """:func:`load_checkpoint_files` of a checkpoint on object storage, downloaded into a temporary directory."""
    from nbtrain.storage.fs import filesystem
    from nbtrain.validate.checkpoints import load_checkpoint_files

    fs, path = filesystem(url)
    with tempfile.TemporaryDirectory(prefix="nbtrain-validate-ckpt-") as local:
        for remote in fs.find(path):
            target = Path(local) / remote[len(path):].lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(remote, str(target))
        return load_checkpoint_files(Path(local))


def _resume(state: _State) -> Outcome:
    run = state.distributed
    step = int(state.checkpoint["step"])
    run.resume()
    attempt = run.record.latest_attempt
    outcome = _finished(Rung.RESUME, run, state.settings)
    if outcome.status.value != "passed":
        return outcome
    resumed = [e for e in run.events() if e.kind.value == "notice" and e.attempt == attempt
               and "resumed from the checkpoint" in str(e.data.get("message", ""))]
    if not resumed:
        return Outcome.failed(Rung.RESUME, f"run {run.id} attempt {attempt} ended without restoring the checkpoint of "
                              f"step {step}: call start = nbtrain.restore(accelerator) before the training loop",
                              Blame.JOB)
    steps = _steps(run, attempt)
    if steps and steps[0] <= step:
        return Outcome.failed(Rung.RESUME, f"run {run.id} attempt {attempt} restored step {step} but reported step "
                              f"{steps[0]} next: start the loop at the step nbtrain.restore returns", Blame.JOB)
    after = f", continued at step {steps[0]}" if steps else ""
    return Outcome.passed(Rung.RESUME, f"run {run.id} attempt {attempt} resumed from step {step}{after}")


_RUNGS: dict[Rung, Callable[[_State], Outcome]] = {
    Rung.CONFIG: _config, Rung.IMPORTS: _imports, Rung.PATHS: _paths, Rung.SINGLE: _single,
    Rung.DISTRIBUTED: _distributed, Rung.CHECKPOINT: _checkpoint, Rung.RESUME: _resume,
}
