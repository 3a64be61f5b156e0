"""The generated main.py runs with plain ``python`` and behaves like the cell did in the notebook."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nbtrain.bundle import Bundle, capture_cell

Notebook = Callable[..., tuple[dict[str, Any], list[str]]]
RunBundle = Callable[[Bundle], tuple[str, str]]


def test_functions_literals_and_result(notebook: Notebook, run_bundle: RunBundle) -> None:
    ns, history = notebook(
        "HIDDEN = 4\nNAMES = ['a', 'b']\n"
        "def build(n):\n    return [helper(i) for i in range(n)]\n"
        "def helper(i):\n    return i * HIDDEN + len(NAMES)\n"
    )
    bundle = capture_cell("out = build(3)\nprint('built', out)\nsum(out)\n", ns, history=history)
    stdout, result = run_bundle(bundle)
    assert stdout == "built [2, 6, 10]\n" and result == "18"


def test_notebook_instances_keep_their_class(notebook: Notebook, run_bundle: RunBundle) -> None:
    """Instances are pickled against the class shipped as source: isinstance holds on the worker."""
    ns, history = notebook(
        textwrap.dedent(
            """
            from dataclasses import dataclass
            import enum

            class Base:
                def scale(self):
                    return 10

            class Model(Base):
                def __init__(self, w):
                    self.w = w
                def __call__(self, x):
                    return self.w * x * self.scale()

            @dataclass
            class Config:
                steps: int = 2

            class Mode(enum.Enum):
                TRAIN = "train"

            model = Model(3)
            config = Config(steps=5)
            mode = Mode.TRAIN
            pair = (model, model)
            """
        )
    )
    cell = (
        "assert isinstance(model, Model) and isinstance(model, Base)\n"
        "assert isinstance(config, Config) and mode is Mode.TRAIN\n"
        "assert pair[0] is pair[1] is model  # shared references survive\n"
        "print(type(model).__name__, config.steps)\n"
        "model(config.steps)\n"
    )
    bundle = capture_cell(cell, ns, history=history)
    assert {c.name: c.kind.value for c in bundle.captured if c.kind.value == "pickle"} == {
        "model": "pickle", "config": "pickle", "mode": "pickle", "pair": "pickle",
    }  # fmt: skip
    stdout, result = run_bundle(bundle)
    assert stdout == "Model 5\n" and result == "150"


def test_numpy_array_closure_and_aliased_imports(notebook: Notebook, run_bundle: RunBundle) -> None:
    ns, history = notebook(
        "import numpy as np\nfrom collections import OrderedDict as OD\n"
        "data = np.arange(12.0).reshape(3, 4)\n"
        "def make(k):\n    return lambda x: x * k\n"
        "triple = make(3)\n"
    )
    cell = "table = OD(total=float(np.sum(data)))\nprint(table)\ntriple(table['total'])\n"
    stdout, result = run_bundle(capture_cell(cell, ns, history=history))
    assert stdout == "OrderedDict([('total', 66.0)])\n" and result == "198.0"


def test_definition_needing_a_pickled_object_at_definition_time(notebook: Notebook, run_bundle: RunBundle) -> None:
    """``def f(x, device=DEVICE)`` with a pickled DEVICE: the loader goes before f, after Device."""
    ns, history = notebook(
        "class Device:\n    def __init__(self, name):\n        self.name = name\n"
        "DEVICE = Device('cpu')\n"
        "def place(x, device=DEVICE):\n    return f'{x}@{device.name}'\n"
        "def log(msg):\n    print(msg)\n"
    )
    bundle = capture_cell("assert isinstance(DEVICE, Device)\nlog(place(1))\n", ns, history=history)
    source = bundle.main_source
    assert source.index("class Device") < source.index("# --- objects") < source.index("def place(")
    stdout, _ = run_bundle(bundle)
    assert stdout == "1@cpu\n"


def test_decorated_notebook_functions_keep_their_decorators(notebook: Notebook, run_bundle: RunBundle) -> None:
    ns, history = notebook(
        "import functools\n"
        "def logged(fn):\n"
        "    @functools.wraps(fn)\n"
        "    def wrapper(*a):\n"
        "        print('call', fn.__name__)\n"
        "        return fn(*a)\n"
        "    return wrapper\n"
        "@logged\ndef add(a, b):\n    return a + b\n"
        "@functools.lru_cache(maxsize=None)\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
    )
    bundle = capture_cell("add(fib(10), 1)\n", ns, history=history)
    kinds = {c.name: c.kind.value for c in bundle.captured}
    assert kinds == {"logged": "source", "add": "source", "fib": "source", "functools": "import"}
    source = bundle.main_source
    assert source.index("def logged(") < source.index("@logged\ndef add(")
    stdout, result = run_bundle(bundle)
    assert stdout == "call add\n" and result == "56"


def test_cell_without_result_and_with_future_import(notebook: Notebook, run_bundle: RunBundle) -> None:
    ns, history = notebook("x = 5\n")
    cell = "from __future__ import annotations\ndef f(a: NotDefinedAnywhere) -> int:\n    return a * 2\nprint(f(x));\n"
    stdout, result = run_bundle(capture_cell(cell, ns, history=history))
    assert stdout == "10\n" and result == "None"


def test_plain_python_main_py_in_the_bundle_directory(notebook: Notebook, tmp_path: Path) -> None:
    """Exactly how a person would run it: ``cd <bundle>; python main.py``."""
    ns, history = notebook("import numpy as np\nclass Box:\n    pass\nbox = Box()\nbox.values = np.arange(3)\n")
    bundle = capture_cell("print(type(box) is Box, int(box.values.sum()))\n", ns, history=history)
    directory = bundle.write(tmp_path)
    proc = subprocess.run([sys.executable, "main.py"], cwd=directory, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "True 3\n"


def test_notebook_names_shadowing_builtins(notebook: Notebook, run_bundle: RunBundle) -> None:
    ns, history = notebook("open = 'not a function'\nglobals = 3\nimport numpy as np\ndata = np.ones(2)\n")
    stdout, result = run_bundle(capture_cell("print(open, globals)\nfloat(data.sum())\n", ns, history=history))
    assert stdout == "not a function 3\n" and result == "2.0"


def test_mutually_recursive_functions(notebook: Notebook, run_bundle: RunBundle) -> None:
    ns, history = notebook(
        "def is_even(n):\n    return True if n == 0 else is_odd(n - 1)\n"
        "def is_odd(n):\n    return False if n == 0 else is_even(n - 1)\n"
    )
    bundle = capture_cell("is_even(10), is_odd(7)\n", ns, history=history)
    assert {c.name for c in bundle.captured} == {"is_even", "is_odd"}
    assert run_bundle(bundle)[1] == "(True, True)"
