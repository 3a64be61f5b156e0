"""The client's functions: plan or submit a bundle, re-run, attach, list, plan a resume.

Every launch goes through :mod:`nbtrain.client.launch` (plan, record, submit, keep the handle).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from nbtrain.backends import get_backend
from nbtrain.backends.base import Backend, Plan
from nbtrain.client import launch
from nbtrain.client.run import Run
from nbtrain.errors import RunNotFoundError
from nbtrain.model import RunState
from nbtrain.spec import JobSpec
from nbtrain.store import Store

__all__ = ["attach", "plan_bundle", "plan_resume", "rerun", "runs", "submit_bundle", "submit_stored"]


def _prepare(bundle: Any, spec: JobSpec, store: Store | None, backend: Backend | None) -> tuple[Store, Backend, Path]:
    store = store or Store()
    store.ensure_writable()
    backend = backend or get_backend(spec.backend, store=store)
    return store, backend, bundle.write(store.bundles)


def plan_bundle(bundle: Any, spec: JobSpec, *, store: Store | None = None, backend: Backend | None = None) -> Plan:
    """Dry run: write the (content-addressed) bundle and return the backend's plan; nothing is submitted."""
    store, backend, bundle_dir = _prepare(bundle, spec, store, backend)
    return backend.plan(spec, str(bundle_dir), bundle.digest, f"{spec.slug}-dryrun")


def _started(run: Run) -> Run:
    run.start_tracking()
    run.watch()
    return run


def submit_bundle(
    bundle: Any,
    spec: JobSpec,
    *,
    store: Store | None = None,
    kind: str = "cell",
    notebook: dict[str, Any] | None = None,
    backend: Backend | None = None,
    profile: str | None = None,
) -> Run:
    """Plan and submit ``bundle`` under ``spec``; returns the watched Run at once.

    ``profile``: the profile the spec started from (``"NAME VERSION"``), kept in the run's record (its locks
    hold for reruns; ``nbtrain stats`` counts the runs started from a template).

    Order: write the bundle (content-addressed), plan (all validation; nothing runs), save the
    RunRecord, then start the gang. A failure before or at submit leaves no run behind.
    """
    store, backend, _ = _prepare(bundle, spec, store, backend)
    return _started(submit_stored(bundle.digest, spec, store=store, kind=kind, notebook=notebook, backend=backend,
                                  profile=profile))


def submit_stored(digest: str, spec: JobSpec, *, store: Store, kind: str = "cell",
                  notebook: dict[str, Any] | None = None, backend: Backend | None = None,
                  profile: str | None = None) -> Run:
    """Plan and submit the bundle ``digest`` already in ``store`` under ``spec`` (a sweep's trials); returns the
    Run, not watched in this process (its MLflow tracking agent is started, as for every launch).

    The order and guarantees of :func:`submit_bundle`: a failure before or at submit leaves no run behind.
    """
    backend = backend or get_backend(spec.backend, store=store)
    run_id = store.new_run_id(spec.name)
    plan = launch.plan_new(store, backend, spec, digest, run_id)
    record = launch.start_new_run(store, backend, plan, kind=kind, notebook=notebook, profile=profile)
    return Run(record, store, backend)


def attach(run_id: str, *, store: Store | None = None, watch: bool = True) -> Run:
    """Rebuild the handle of ``run_id`` (a unique prefix is enough) from the store, e.g. after a kernel restart."""
    store = store or Store()
    record = store.load(store.resolve(run_id))
    run = Run(record, store)
    run.sync()
    return _started(run) if watch else run


def rerun(run_id: str | None = None, *, store: Store | None = None,
          spec: Callable[[JobSpec], JobSpec] | None = None,
          locked_base: Callable[[JobSpec], JobSpec] | None = None) -> Run:
    """Run ``run_id`` (default: the newest FAILED run) again as a NEW run: same bundle, no checkpoint.

    The spec is the source run's, or ``spec(source_spec)`` (overrides: ``%nbtrain rerun RUN --nodes 1``,
    ``nbtrain debug``); the new spec is validated by the backend's plan like any submission. The locks of the
    profile the source run started from hold: an override may not change what it locks, compared with the source's
    spec, or with ``locked_base(source_spec)`` (``nbtrain debug``: its own small shape is not an override).
    """
    store = store or Store()
    if run_id is None:
        failed = [r for r in runs(store=store) if r.status() is RunState.FAILED]
        if not failed:
            raise RunNotFoundError("there is no failed run to re-run; name one: nbtrain rerun RUN (%nbtrain rerun RUN).")
        source = failed[0]
    else:
        source = attach(run_id, store=store, watch=False)
    launch.bundle_dir_of(store, source.record.bundle_digest, source.id)
    new_spec = spec(source.spec) if spec is not None else source.spec
    base_spec = locked_base(source.spec) if locked_base is not None else source.spec
    if source.record.profile and new_spec != base_spec:
        from nbtrain.profiles.apply import check_recorded_locks

        check_recorded_locks(source.record.profile, base_spec, new_spec)
    backend = get_backend(source.record.backend if spec is None else new_spec.backend, store=store)
    new_id = store.new_run_id(source.spec.name)
    plan = launch.plan_new(store, backend, new_spec, source.record.bundle_digest, new_id)
    record = launch.start_new_run(store, backend, plan, kind=source.record.kind,
                                  notebook=dict(source.record.notebook), attempt_info={"rerun_of": source.id},
                                  profile=source.record.profile)
    return _started(Run(record, store, backend))


def plan_resume(run_id: str, bundle: Any | None = None, *, store: Store | None = None) -> Plan:
    """The plan of the next attempt of ``run_id`` (with ``bundle``, else its own): a dry run of a resume."""
    store = store or Store()
    run = attach(run_id, store=store, watch=False)
    digest = None
    if bundle is not None:
        bundle.write(store.bundles)
        digest = bundle.digest
    return run.plan_resume(digest)


def runs(*, store: Store | None = None) -> list[Run]:
    """Every run in the store, newest first (handles are not watched)."""
    store = store or Store()
    return [Run(record, store) for record in store.records()]
