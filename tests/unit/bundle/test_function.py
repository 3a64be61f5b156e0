"""capture_function: the decorated-function form (``@nbtrain.distributed``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from nbtrain.bundle import RESULT_NAME, Bundle, capture_function
from nbtrain.errors import CaptureError, UndefinedNameError

Notebook = Callable[..., tuple[dict[str, Any], list[str]]]
RunBundle = Callable[[Bundle], tuple[str, str]]

# A stand-in for nbtrain.distributed: what matters is the name and that it comes from nbtrain.
FAKE_DECORATOR = (
    "def distributed(**options):\n"
    "    def decorate(fn):\n"
    "        return fn\n"
    "    return decorate\n"
    "distributed.__module__ = 'nbtrain.decorator'\n"
)


def test_function_with_args_and_kwargs(notebook: Notebook, run_bundle: RunBundle) -> None:
    ns, history = notebook(
        FAKE_DECORATOR + "SCALE = 3\ndef helper(x):\n    return x * SCALE\n"
        "@distributed(\n    nodes=2,\n    gpus=2,\n)\n"
        "def train(a, b=1, *, tag='t'):\n    print('training', tag)\n    return helper(a) + b\n"
    )
    train = ns["train"]
    bundle = capture_function(train, (2,), {"b": 10, "tag": "run"}, history=history)
    source = bundle.main_source
    assert "@distributed" not in source and "nodes=2" not in source
    assert "def train(a, b=1, *, tag='t'):" in source
    assert f"_nbtrain_args = (2,)\n_nbtrain_kwargs = {{'b': 10, 'tag': 'run'}}\n{RESULT_NAME} = train(" in source
    assert {c.name: c.kind.value for c in bundle.captured} == {
        "SCALE": "literal", "helper": "source", "_nbtrain_args": "literal", "_nbtrain_kwargs": "literal",
    }  # fmt: skip
    assert bundle.manifest["kind"] == "function" and bundle.manifest["function"] == "train"
    assert bundle.manifest["cell"] is None
    stdout, result = run_bundle(bundle)
    assert stdout == "training run\n" and result == "16"


def test_pickled_arguments_and_nbtrain_dotted_decorator(notebook: Notebook, run_bundle: RunBundle) -> None:
    ns, history = notebook(
        "import nbtrain\nimport numpy as np\n"
        "class Batch:\n    def __init__(self, xs):\n        self.xs = xs\n"
        "@nbtrain.distributed(nodes=1)\n"
        "def total(batch, scale=1.0):\n    assert isinstance(batch, Batch)\n    return float(np.sum(batch.xs)) * scale\n"
    )
    batch = ns["Batch"](ns["np"].arange(5.0))
    bundle = capture_function(ns["total"], (batch,), {"scale": 2.0}, history=history)
    kinds = {c.name: c.kind.value for c in bundle.captured}
    assert kinds == {"np": "import", "Batch": "source", "_nbtrain_args": "pickle", "_nbtrain_kwargs": "literal"}
    assert "nbtrain.distributed" not in bundle.main_source and "import nbtrain" not in bundle.main_source
    _stdout, result = run_bundle(bundle)
    assert result == "20.0"


def test_wrapper_from_the_decorator_is_unwrapped(notebook: Notebook) -> None:
    ns, history = notebook(
        "import functools\n"
        "def distributed(fn):\n"
        "    @functools.wraps(fn)\n"
        "    def submit(*a, **k):\n"
        "        raise RuntimeError('would submit')\n"
        "    return submit\n"
        "distributed.__module__ = 'nbtrain.decorator'\n"
        "@distributed\ndef train():\n    return train_step()\n"
        "def train_step():\n    return 1\n"
    )
    bundle = capture_function(ns["train"], (), {}, history=history)
    assert "@distributed" not in bundle.main_source and "def train():" in bundle.main_source
    assert {c.name for c in bundle.captured} == {"train_step", "_nbtrain_args", "_nbtrain_kwargs"}


def test_closure_is_pickled_and_module_function_imported(notebook: Notebook, run_bundle: RunBundle) -> None:
    ns, _history = notebook("def make(k):\n    def scaled(x):\n        return x * k\n    return scaled\n")
    bundle = capture_function(ns["make"](4), (5,), {})
    assert bundle.captured[0].kind.value == "pickle" and bundle.captured[0].name == "scaled"
    assert run_bundle(bundle)[1] == "20"
    imported = capture_function(math.factorial, (5,), {})
    assert "from math import factorial\n" in imported.main_source
    assert run_bundle(imported)[1] == "120"


def test_function_errors(notebook: Notebook) -> None:
    ns, history = notebook("def train():\n    return missing_helper()\n")
    with pytest.raises(UndefinedNameError, match=r"'missing_helper' at function train, line 2"):
        capture_function(ns["train"], (), {}, history=history)
    with pytest.raises(CaptureError, match="needs a function"):
        capture_function(42, (), {})  # type: ignore[arg-type]
