"""tests/integration/kubernetes/conftest.py as a module, for suites that reuse its fake-cluster set-up."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["kubernetes_fixtures"]

KUBERNETES_TESTS = Path(__file__).resolve().parents[1] / "integration" / "kubernetes"


def kubernetes_fixtures() -> ModuleType:
    """The module (loaded once per process): its ``running_cluster`` sets the fake cluster up as everywhere else."""
    name = "nbtrain_kubernetes_fixtures"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, KUBERNETES_TESTS / "conftest.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
