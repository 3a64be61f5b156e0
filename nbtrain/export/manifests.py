"""Kubernetes manifests of a job, through the kubernetes backend's own dry run.

The backend is the one place that turns a JobSpec into Kubernetes objects: its dry run,
``get_backend("kubernetes").plan(spec, bundle_dir, digest, run_id)``, carries them in
``request.objects`` (written here as multi-document YAML, complete, for ``kubectl apply -f``), or
else as text in ``request.describe``. This module only asks it, once per flavor, and says clearly
why when it cannot.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from nbtrain.bundle.model import Bundle
from nbtrain.contract import describe_request
from nbtrain.errors import NbtrainError, SpecError
from nbtrain.spec import JobSpec

__all__ = ["FLAVORS", "Manifests", "kubernetes_manifests", "manifest_yaml"]

#: Every Kubernetes flavor a JobSpec accepts (``--flavor``).
FLAVORS = ("job", "pytorchjob", "jobset", "trainjob")


@dataclass(frozen=True)
class Manifests:
    """YAML per flavor that planned, and the reason for each flavor (or the backend) that did not."""

    yaml: dict[str, str]
    missing: dict[str, str]


def _backend() -> object:
    from nbtrain.backends import get_backend

    return get_backend("kubernetes")


def manifest_yaml(spec: JobSpec, bundle: Bundle, flavor: str | None = None, *, bundle_dir: Path | None = None) -> str:
    """The YAML of the objects the kubernetes backend would create for ``spec`` (``flavor``: default the spec's).

    ``bundle_dir`` is where the bundle is written for the plan (a temporary directory when None).
    Raises :class:`SpecError` for an unknown flavor or when the kubernetes backend is not available,
    and whatever the backend's plan raises (SpecError/EnvironmentProblem) for a spec it refuses.
    """
    chosen = flavor or spec.flavor
    if chosen not in FLAVORS:
        raise SpecError(f"--flavor: unknown value {chosen!r}; choose one of: {', '.join(FLAVORS)}.")
    try:
        backend = _backend()
    except NbtrainError as error:
        raise SpecError(
            f"the kubernetes backend is not available in this installation ({error})."
        ) from None
    k8s_spec = spec.with_changes(backend="kubernetes", flavor=chosen)
    with tempfile.TemporaryDirectory(prefix="nbtrain-manifests-") as tmp:
        directory = bundle.write(Path(bundle_dir) if bundle_dir is not None else Path(tmp))
        plan = backend.plan(k8s_spec, str(directory), bundle.digest, spec.slug)  # type: ignore[attr-defined]
    objects = getattr(plan.request, "objects", None)  # a KubernetesRequest's manifests, in the order applied
    if isinstance(objects, tuple) and objects and all(isinstance(o, dict) for o in objects):
        import yaml

        return str(yaml.safe_dump_all(list(objects), sort_keys=False, default_flow_style=False, width=120))
    describe = describe_request(plan.request)
    if not isinstance(describe, str):
        raise SpecError(f"the kubernetes backend's plan for flavor {chosen!r} has no YAML to show.")
    return describe


def kubernetes_manifests(spec: JobSpec, bundle: Bundle) -> Manifests:
    """The manifests of every flavor; a flavor the backend refuses (or a missing backend) has a reason."""
    yaml: dict[str, str] = {}
    missing: dict[str, str] = {}
    for flavor in FLAVORS:
        try:
            yaml[flavor] = manifest_yaml(spec, bundle, flavor)
        except NbtrainError as error:
            missing[flavor] = str(error)
    return Manifests(yaml, missing)
