"""The public surface: a cheap ``import nbtrain``, a complete ``__all__``, one exception tree."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest

import nbtrain
import nbtrain.errors as errors
from nbtrain.errors import NbtrainError

HEAVY = ("torch", "accelerate", "mlflow", "IPython", "cloudpickle")

PROBE = """
import json, sys, time
started = time.perf_counter()
import nbtrain
elapsed = time.perf_counter() - started
print(json.dumps({"elapsed": elapsed, "loaded": sorted(m for m in sys.argv[1:] if m in sys.modules)}))
"""


def test_import_is_fast_and_loads_no_heavy_dependency() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE, *HEAVY], capture_output=True, text=True, timeout=60, check=True)
    report = json.loads(out.stdout)
    assert report["loaded"] == []
    assert report["elapsed"] < 0.5


def test_version_is_a_string() -> None:
    assert isinstance(nbtrain.__version__, str)
    assert nbtrain.__version__.count(".") >= 1


@pytest.mark.parametrize("name", nbtrain.__all__)
def test_every_public_name_resolves(name: str) -> None:
    assert getattr(nbtrain, name) is not None
    assert name in dir(nbtrain)


def test_star_import_gives_exactly_the_public_names() -> None:
    namespace: dict[str, object] = {}
    exec("from nbtrain import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(nbtrain.__all__)


def test_jobspec_from_the_package_is_the_real_one() -> None:
    from nbtrain.spec import JobSpec

    assert nbtrain.JobSpec is JobSpec


def test_unknown_attribute_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'no_such_thing'"):
        _ = nbtrain.no_such_thing
    assert not hasattr(nbtrain, "no_such_thing")


def _error_classes() -> list[type[BaseException]]:
    return [obj for _, obj in inspect.getmembers(errors, inspect.isclass)
            if issubclass(obj, BaseException) and obj.__module__ == errors.__name__]


def test_errors_all_lists_every_error_class() -> None:
    assert sorted(errors.__all__) == sorted(cls.__name__ for cls in _error_classes())


@pytest.mark.parametrize("name", errors.__all__)
def test_every_error_is_an_nbtrain_error(name: str) -> None:
    assert issubclass(getattr(errors, name), NbtrainError)


@pytest.mark.parametrize(
    ("name", "builtin"),
    [
        ("SpecError", ValueError),
        ("CellSyntaxError", SyntaxError),
        ("UndefinedNameError", NameError),
        ("EnvironmentProblem", RuntimeError),
        ("BackendError", RuntimeError),
        ("RunNotFoundError", LookupError),
        ("RunFailedError", RuntimeError),
    ],
)
def test_errors_can_also_be_caught_as_the_builtin_they_resemble(name: str, builtin: type[BaseException]) -> None:
    assert issubclass(getattr(errors, name), builtin)


@pytest.mark.parametrize(
    "name", ["CellSyntaxError", "UndefinedNameError", "UnpicklableError", "BundleTooLargeError", "SecretInBundleError"]
)
def test_capture_problems_share_one_base(name: str) -> None:
    assert issubclass(getattr(errors, name), errors.CaptureError)


def test_error_tree_docstring_names_every_error() -> None:
    doc = errors.__doc__ or ""
    for name in errors.__all__:
        assert name in doc


def test_run_failed_error_carries_the_failure() -> None:
    failure = object()
    error = errors.RunFailedError("rank 3 failed: ValueError: boom", failure)
    assert error.failure is failure
    assert str(error) == "rank 3 failed: ValueError: boom"


def test_storage_functions_from_the_package_are_the_runtime_api() -> None:
    from nbtrain.storage import api

    assert nbtrain.resolve is api.resolve
    assert nbtrain.dataset_path is api.dataset_path
