"""capture_cell: what ships and how, as seen in main.py, the captured table and the manifest."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nbtrain.bundle import RESULT_NAME, Bundle, CaptureKind, CaptureOptions, capture_cell

Notebook = Callable[..., tuple[dict[str, Any], list[str]]]


def kinds(bundle: Bundle) -> dict[str, str]:
    return {c.name: c.kind.value for c in bundle.captured}


def section(bundle: Bundle, title: str) -> str:
    """The text of one ``# --- title ---`` section of main.py."""
    text = bundle.main_source
    start = text.index(f"# --- {title}")
    start = text.index("\n", start) + 1
    end = text.find("\n# --- ", start)
    return text[start : end if end >= 0 else len(text)].strip("\n")


def test_notebook_functions_ship_as_source_in_dependency_order(notebook: Notebook) -> None:
    ns, history = notebook(
        "SCALE = 3\n"
        "def train(x):\n    return step(x) + evaluate(x)\n"
        "def step(x):\n    return helper(x) * SCALE\n"
        "def helper(x):\n    return x + 1\n"
        "def evaluate(x):\n    return step(x) - 1\n"
    )
    bundle = capture_cell("train(2)\n", ns, history=history)
    assert kinds(bundle) == {
        "SCALE": "literal",
        "helper": "source",
        "step": "source",
        "evaluate": "source",
        "train": "source",
    }
    defs = section(bundle, "definitions from the notebook")
    positions = [defs.index(f"def {name}(") for name in ("helper", "step", "evaluate", "train")]
    assert positions == sorted(positions), defs  # callees first
    assert section(bundle, "values from the notebook") == "SCALE = 3"


def test_classes_subclasses_dataclasses_and_enums(notebook: Notebook) -> None:
    ns, history = notebook(
        textwrap.dedent(
            """
            import dataclasses, enum
            from dataclasses import dataclass, field

            class Base:
                def describe(self):
                    return "base"

            @dataclass
            class Config:
                lr: float = 0.1
                tags: list = field(default_factory=list)

            class Color(enum.Enum):
                RED = 1

            class Child(Base):
                def describe(self):
                    return "child of " + super().describe()
            """
        )
    )
    bundle = capture_cell("Child().describe(), Config(), Color.RED\n", ns, history=history)
    assert kinds(bundle) == {
        "enum": "import", "dataclass": "import", "field": "import",
        "Base": "source", "Child": "source", "Config": "source", "Color": "source",
    }  # fmt: skip
    defs = section(bundle, "definitions from the notebook")
    assert defs.index("class Base:") < defs.index("class Child(Base):")
    assert "@dataclass\nclass Config:" in defs
    assert "from dataclasses import dataclass" in section(bundle, "imports")


def test_aliased_imports(notebook: Notebook) -> None:
    ns, history = notebook(
        "import numpy as np\nimport torch.nn as nn\nimport os.path\n"
        "from collections import OrderedDict as OD\nfrom json import JSONDecoder\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
    )
    bundle = capture_cell("np, nn, os.path, OD, JSONDecoder, ThreadPoolExecutor\n", ns, history=history)
    imports = section(bundle, "imports").splitlines()
    assert imports == [
        "import numpy as np",
        "import os",
        "import torch.nn as nn",
        "from collections import OrderedDict as OD",
        "from concurrent.futures import ThreadPoolExecutor",  # not concurrent.futures.thread
        "from json import JSONDecoder",  # not json.decoder
    ]
    assert {c.detail for c in bundle.captured} >= {"import torch.nn as nn", "import numpy as np"}


def test_shortest_public_parent_package(notebook: Notebook) -> None:
    pytest.importorskip("sklearn")
    ns, _history = notebook("from sklearn.datasets._base import load_digits\n")
    assert "from sklearn.datasets import load_digits" in capture_cell("load_digits\n", ns).main_source


def test_literals(notebook: Notebook) -> None:
    ns, history = notebook(
        "A = None\nB = True\nC = 1.5\nD = float('inf')\nE = float('nan')\nF = 'text'\nG = b'raw'\n"
        "H = [1, (2, 3), {'k': {4, 5}}]\nI = frozenset({'b', 'a'})\nJ = -float('inf')\n"
    )
    bundle = capture_cell("A, B, C, D, E, F, G, H, I, J\n", ns, history=history)
    assert set(kinds(bundle).values()) == {"literal"}
    values = section(bundle, "values from the notebook")
    assert "D = float('inf')" in values and "E = float('nan')" in values and "J = -float('inf')" in values
    assert "I = frozenset({'a', 'b'})" in values
    namespace: dict[str, Any] = {}
    exec(values, namespace)
    assert namespace["H"] == [1, (2, 3), {"k": {4, 5}}] and namespace["G"] == b"raw"


def test_long_or_non_plain_values_are_pickled(notebook: Notebook) -> None:
    ns, history = notebook(
        "import collections\nBIG = list(range(1000))\nSUB = collections.OrderedDict(a=1)\nCYC = []\nCYC.append(CYC)\n"
    )
    bundle = capture_cell("BIG, SUB, CYC\n", ns, history=history, options=CaptureOptions(max_literal_chars=100))
    assert kinds(bundle) == {"BIG": "pickle", "SUB": "pickle", "CYC": "pickle"}
    assert capture_cell("BIG\n", ns).captured[0].kind is CaptureKind.LITERAL  # 10_000 chars is enough


def test_large_numpy_array_is_pickled_and_its_size_reported(notebook: Notebook) -> None:
    ns, history = notebook("import numpy as np\ndata = np.ones((2000, 1000))\n")
    bundle = capture_cell("data.sum()\n", ns, history=history)
    (entry,) = bundle.captured
    assert entry.kind is CaptureKind.PICKLE and entry.detail == "ndarray float64 (2000, 1000)"
    assert 16_000_000 <= entry.size < 16_100_000
    assert len(bundle.files["objects.pkl"]) >= entry.size
    assert "objects.pkl, 15.3 MB" in bundle.main_source
    report = bundle.report()
    assert "data" in report and "pickle" in report and "15.3 MB" in report and bundle.digest in report


def test_closures_and_lambdas_are_pickled_with_the_reason(notebook: Notebook) -> None:
    ns, history = notebook(
        "def make(k):\n    def scaled(x):\n        return x * k\n    return scaled\n"
        "triple = make(3)\nsquare = lambda x: x * x\n"
    )
    bundle = capture_cell("triple(2) + square(3)\n", ns, history=history)
    details = {c.name: c.detail for c in bundle.captured}
    assert kinds(bundle) == {"triple": "pickle", "square": "pickle"}
    assert "closes over local variables (k)" in details["triple"]
    assert "lambda" in details["square"]


def test_function_using_a_notebook_global(notebook: Notebook) -> None:
    ns, history = notebook(
        "import numpy as np\nWEIGHTS = np.arange(3.0)\ndef score(x):\n    return (WEIGHTS * x).sum()\n"
    )
    bundle = capture_cell("score(2)\n", ns, history=history)
    assert kinds(bundle) == {"score": "source", "WEIGHTS": "pickle"}


def test_names_the_cell_binds_are_not_captured_from_functions(notebook: Notebook) -> None:
    ns, history = notebook("import threading\nmodel = threading.Lock()\ndef fit():\n    return model\n")
    # The cell rebinds ``model`` before calling fit(): the notebook's (unpicklable) one is not needed.
    bundle = capture_cell("model = 'fresh'\nfit()\n", ns, history=history)
    assert kinds(bundle) == {"fit": "source"}


def test_last_expression_becomes_the_result(notebook: Notebook) -> None:
    ns, history = notebook("x = 2\n")
    bundle = capture_cell("y = x * 3\n# comment kept\ny + (\n    1  # inner\n)\n", ns, history=history)
    body = bundle.main_source.split("here) ---", 1)[1]
    assert f"{RESULT_NAME} = (y + (\n    1  # inner\n))\n" in body
    assert "# comment kept" in body
    suppressed = capture_cell("x + 1;\n", ns)
    assert RESULT_NAME not in suppressed.main_source
    shared_line = capture_cell("a = 1; a + x\n", ns)
    assert f"a = 1; {RESULT_NAME} = (a + x)" in shared_line.main_source


def test_cell_line_mapping_in_main_py(notebook: Notebook) -> None:
    ns, _history = notebook("x = 1\n")
    bundle = capture_cell("a = x\nb = a\n", ns, cell_line_offset=3)
    lines = bundle.main_source.splitlines()
    main_line = bundle.manifest["cell"]["main_line"]
    assert lines[main_line - 1] == "a = x"
    assert f"(cell line 4 is line {main_line} here)" in lines[main_line - 2]
    assert bundle.manifest["cell"]["line_offset"] == 3


def test_future_imports_go_first_and_line_numbers_stay(notebook: Notebook) -> None:
    ns, history = notebook("x = 1\n")
    cell = "from __future__ import annotations\ndef f(a: Undefined) -> int:\n    return a\nf(x)\n"
    bundle = capture_cell(cell, ns, history=history)
    source = bundle.main_source
    first_code = next(line for line in source.splitlines() if line and not line.startswith("#"))
    assert first_code == "from __future__ import annotations"
    main_line = bundle.manifest["cell"]["main_line"]
    assert source.splitlines()[main_line] == "def f(a: Undefined) -> int:"  # body line 2
    compile(source, "main.py", "exec")


def test_main_py_is_readable_and_does_not_import_nbtrain(notebook: Notebook) -> None:
    ns, history = notebook("import numpy as np\nN = 4\ndef f(n):\n    return n\narr = np.zeros(2)\n")
    bundle = capture_cell(
        "f(N) + np.sum(arr)\n", ns, history=history, notebook={"path": "demo.ipynb", "cell_id": "c-7"}
    )
    source = bundle.main_source
    header = source.splitlines()[:2]
    assert header[0].startswith("# Generated by nbtrain ") and "cell c-7 of demo.ipynb" in header[0]
    assert "Captured: 1 import, 1 definition, 1 literal, 1 pickled object." in header[1]
    for title in ("imports", "values from the notebook", "definitions from the notebook", "objects that cannot"):
        assert f"# --- {title}" in source
    assert source.index("# --- definitions") < source.index("# --- objects") < source.index("# --- the cell")
    tree = ast.parse(source)
    imported = {n.names[0].name for n in ast.walk(tree) if isinstance(n, ast.Import)}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any(name.startswith("nbtrain") for name in imported)
    assert "__file__" in section(bundle, "objects that cannot")


def test_manifest_contents(notebook: Notebook) -> None:
    ns, history = notebook("import numpy as np\narr = np.zeros(3)\nK = 2\n")
    bundle = capture_cell("arr * K\n", ns, history=history, notebook={"path": "nb.ipynb", "cell_id": "abc"})
    manifest = bundle.manifest
    assert manifest["format"] == 1 and manifest["kind"] == "cell" and manifest["entry"] == "main.py"
    assert set(manifest["files"]) == {"main.py", "objects.pkl"}
    assert manifest["sizes"]["objects.pkl"] == len(bundle.files["objects.pkl"])
    assert manifest["notebook"] == {"path": "nb.ipynb", "cell_id": "abc"}
    assert manifest["function"] is None and manifest["created_by"].startswith("nbtrain ")
    assert set(manifest["versions"]) == {"python", "cloudpickle", "torch", "accelerate"}
    assert manifest["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert [c["name"] for c in manifest["captured"]] == ["K", "arr"]
    assert json.loads(bundle.manifest_bytes) == dict(manifest)
    assert bundle.digest == __import__("hashlib").sha256(bundle.manifest_bytes).hexdigest()


def test_same_cell_and_namespace_give_the_same_digest(notebook: Notebook) -> None:
    code = "import numpy as np\narr = np.arange(10)\nS = {'b', 'a', 'c'}\ndef f(x):\n    return x\n"
    ns, history = notebook(code)
    first = capture_cell("f(arr), S\n", ns, history=history)
    second = capture_cell("f(arr), S\n", ns, history=history)
    assert first.digest == second.digest and first.files == second.files
    assert capture_cell("f(arr), S  # changed\n", ns, history=history).digest != first.digest


def test_digest_is_stable_across_processes(tmp_path: Path) -> None:
    """String hashing is randomised per process: set literals must still render identically."""
    script = (
        "from nbtrain.bundle import capture_cell\n"
        "ns = {'__name__': '__main__'}\n"
        "code = \"S = {'alpha', 'beta', 'gamma', 'delta'}\\nD = {'z': frozenset({'q', 'r', 's'})}\\n\"\n"
        "exec(code, ns)\n"
        "print(capture_cell('S, D\\n', ns, history=['', code]).digest)\n"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60,
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).parents[3])},
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }  # fmt: skip
    assert len(digests) == 1


def test_attached_files(notebook: Notebook, tmp_path: Path) -> None:
    data = tmp_path / "labels.txt"
    data.write_text("cat\ndog\n")
    ns, _history = notebook("x = 1\n")
    bundle = capture_cell("x\n", ns, options=CaptureOptions(extra_files=(str(data),)))
    assert bundle.files["files/labels.txt"] == b"cat\ndog\n"
    assert "files/labels.txt" in bundle.manifest["files"]
    assert "#   files/labels.txt (8 bytes)" in bundle.main_source


def test_bundle_is_immutable(notebook: Notebook) -> None:
    ns, _history = notebook("x = 1\n")
    bundle = capture_cell("x\n", ns)
    with pytest.raises(TypeError):
        bundle.files["main.py"] = b""  # type: ignore[index]
    with pytest.raises(AttributeError):
        bundle.captured = ()  # type: ignore[misc]


def test_importing_the_package_is_cheap() -> None:
    script = (
        "import sys, nbtrain\n"
        "before = set(sys.modules)\n"
        "import nbtrain.bundle\n"
        "from nbtrain.bundle import capture_cell, verify_bundle, CaptureOptions\n"
        "heavy = {'torch', 'numpy', 'IPython', 'cloudpickle'} & (set(sys.modules) - before)\n"
        "print(sorted(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
