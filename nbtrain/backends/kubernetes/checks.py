"""The Kubernetes backend's answers to ``nbtrain doctor`` and to ``nbtrain validate``/export (no API call).

- :func:`doctor_checks`: where this process would reach a cluster from (in-cluster service account, a kubeconfig,
  or none); informational: a machine without a cluster still runs local jobs.
- :func:`export_check`: the job's manifests, rendered by the backend's own dry run and schema-checked strictly when
  ``kubernetes-validate`` is installed; a one-line summary, or SpecError naming what the cluster would refuse.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbtrain.errors import SpecError
from nbtrain.spec import JobSpec

if TYPE_CHECKING:
    from nbtrain.backends.kubernetes.backend import KubernetesBackend
    from nbtrain.doctor import Check

__all__ = ["PLACEHOLDER_IMAGE", "doctor_checks", "export_check"]

#: The image a job that names none is checked with (its manifests, not its image, are what validate looks at).
PLACEHOLDER_IMAGE = "registry.invalid/nbtrain-validate:placeholder"


def doctor_checks() -> list[Check]:
    """One informational line: the in-cluster service account, the kubeconfig found, or that there is none."""
    from nbtrain.doctor import Check

    config = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return [Check("kubernetes", True, "in-cluster service account")]
    if any(Path(p).is_file() for p in config.split(os.pathsep)):
        return [Check("kubernetes", True, f"kubeconfig {config}")]
    return [Check("kubernetes", True, f"no kubeconfig ({config}): --backend kubernetes cannot reach a cluster")]


def export_check(backend: KubernetesBackend, spec: JobSpec, bundle: Any) -> str:
    """Render ``spec``'s manifests (with ``bundle``, a :class:`nbtrain.bundle.model.Bundle`) and schema-check them.

    A job of this backend needs an image (SpecError naming ``[job] image`` otherwise); a job of another backend
    without one is checked with :data:`PLACEHOLDER_IMAGE`, and its summary says so. Raises SpecError: the plan's own
    (as the plan says it) for an option the cluster would refuse, or one prefixed "kubernetes manifests:" for a
    document that does not validate."""
    image = spec.image or backend.options.image or ""
    if not image and spec.backend == "kubernetes":
        raise SpecError("--image: a kubernetes job needs a container image; set [job] image in nbtrain.toml.")
    k8s_spec = spec.with_changes(backend="kubernetes", image=image or PLACEHOLDER_IMAGE)
    with tempfile.TemporaryDirectory(prefix="nbtrain-manifests-") as tmp:
        directory = bundle.write(Path(tmp))
        plan = backend.plan(k8s_spec, str(directory), bundle.digest, spec.slug)  # SpecError: what it refuses
    documents = [dict(o) for o in plan.request.objects]
    checked = _schema_check(documents)
    shown = " with a placeholder image" if not image else ""
    return f"{len(documents)} kubernetes object(s) ({k8s_spec.flavor}){shown}{checked}"


def _schema_check(documents: list[dict[str, Any]]) -> str:
    """Strict schema validation of every document with ``kubernetes-validate`` (when it is installed)."""
    try:
        import kubernetes_validate
    except ImportError:
        return " (kubernetes-validate not installed: schemas not checked)"
    for document in documents:
        try:
            kubernetes_validate.validate(document, kubernetes_validate.latest_version(), strict=True)
        except Exception as error:  # noqa: BLE001 - its ValidationError and version errors alike
            kind = f"{document.get('kind')}/{(document.get('metadata') or {}).get('name')}"
            raise SpecError(f"kubernetes manifests: {kind} does not validate: {error}") from None
    return ", schemas valid"
