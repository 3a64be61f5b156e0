"""Helpers shared by the Kubernetes unit tests (importable: conftest puts this directory on sys.path)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import yaml

CRDS = Path(__file__).resolve().parents[2] / "data" / "crds"  # vendored upstream CRDs: see its README.md


def walk(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every (path, value) in a nested manifest."""
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from walk(value, f"{path}[{index}]")


def pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """Every pod template spec inside a Job / PyTorchJob / JobSet."""
    return [value["spec"] for path, value in walk(obj)
            if isinstance(value, dict) and path.endswith("template") and "containers" in (value.get("spec") or {})]


def strict(schema: Any) -> Any:
    """A CRD openAPIV3Schema that rejects unknown fields wherever it lists properties.

    (The API server prunes unknown fields of structural schemas; tests treat them as errors.)
    """
    schema = copy.deepcopy(schema)

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("properties") and "additionalProperties" not in node \
                    and not node.get("x-kubernetes-preserve-unknown-fields"):
                node["additionalProperties"] = False
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(schema)
    return schema


@cache
def crd_schema(filename: str, version: str) -> Any:
    """The strict openAPIV3Schema of ``version`` in tests/data/crds/``filename``."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the CRDs are megabytes of YAML
    for doc in yaml.load_all((CRDS / filename).read_text(), Loader=loader):
        if doc and doc.get("kind") == "CustomResourceDefinition":
            for entry in doc["spec"]["versions"]:
                if entry["name"] == version:
                    return strict(entry["schema"]["openAPIV3Schema"])
    raise LookupError(f"{filename} has no version {version}")
