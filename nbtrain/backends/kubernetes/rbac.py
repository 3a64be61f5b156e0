"""The shipped minimal Role/RoleBinding (``rbac.yaml``), rendered for a namespace and service account."""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

__all__ = ["rbac_manifests", "rbac_text"]


def rbac_text(namespace: str = "NAMESPACE", service_account: str = "SERVICE_ACCOUNT") -> str:
    """``rbac.yaml`` with its placeholders replaced (the defaults keep them)."""
    text = (resources.files("nbtrain.backends.kubernetes") / "rbac.yaml").read_text(encoding="utf-8")
    return text.replace("SERVICE_ACCOUNT", service_account).replace("NAMESPACE", namespace)


def rbac_manifests(namespace: str, service_account: str) -> list[dict[str, Any]]:
    """The Role and RoleBinding as API objects."""
    return [doc for doc in yaml.safe_load_all(rbac_text(namespace, service_account)) if doc]
