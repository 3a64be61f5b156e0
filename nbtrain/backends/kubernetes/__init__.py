"""Kubernetes backend: a cell as a gang of pods (Indexed Job, Kubeflow PyTorchJob or JobSet).

Modules: ``manifests``/``pod``/``payload``/``names``/``validate`` build the objects (pure);
``api`` is the only I/O with the official client; ``errors`` maps API failures to nbtrain errors;
``mirror``/``files``/``lines``/``podstate`` follow a run into the store; ``backend`` ties them up.
"""

from __future__ import annotations

from nbtrain.backends.kubernetes.backend import KubernetesBackend
from nbtrain.backends.kubernetes.config import KubeOptions
from nbtrain.backends.kubernetes.rbac import rbac_manifests, rbac_text

__all__ = ["KubeOptions", "KubernetesBackend", "rbac_manifests", "rbac_text"]
