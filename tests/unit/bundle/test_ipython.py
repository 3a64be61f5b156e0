"""Capture against a real IPython shell: cells in linecache, ``In`` as history, real transforms."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from nbtrain.bundle import Bundle, capture_cell
from nbtrain.errors import CaptureError, UndefinedNameError

RunBundle = Callable[[Bundle], tuple[str, str]]


def capture(shell: Any, body: str) -> Bundle:
    """What %%distributed does: transform the body, history without the current cell."""
    return capture_cell(shell.transform_cell(body), shell.user_ns, history=shell.user_ns["In"])


def test_definitions_from_cells(shell: Any, run_cells: Callable[..., None], run_bundle: RunBundle) -> None:
    run_cells(
        "import numpy as np\nfrom dataclasses import dataclass\nHIDDEN = 8",
        "class Layer:\n    def __init__(self, n):\n        self.n = n\n    def forward(self, x):\n        return x * self.n",
        "class Scaled(Layer):\n    pass",
        "@dataclass\nclass Config:\n    hidden: int = HIDDEN",
        "def build(cfg):\n    return Scaled(cfg.hidden)",
        "cfg = Config()\nweights = np.ones(3)",
    )
    bundle = capture(shell, "model = build(cfg)\nprint(isinstance(cfg, Config))\nmodel.forward(weights.sum())\n")
    kinds = {c.name: c.kind.value for c in bundle.captured}
    assert kinds == {
        "dataclass": "import", "HIDDEN": "literal", "Layer": "source", "Scaled": "source", "Config": "source",
        "build": "source", "cfg": "pickle", "weights": "pickle",
    }  # fmt: skip
    stdout, result = run_bundle(bundle)
    assert stdout == "True\n" and float(result.removeprefix("np.float64(").rstrip(")")) == 24.0


def test_redefined_class_ships_its_current_definition(shell: Any, run_cells: Callable[..., None]) -> None:
    run_cells(
        "class Net:\n    def version(self):\n        return 1",
        "net = Net()",
        "class Net:\n    def version(self):\n        return 2",
        "old_net_class = type(net)",
    )
    # The instance's class is the *first* definition; linecache finds that exact cell.
    bundle = capture(shell, "old_net_class().version()\n")
    (entry,) = bundle.captured
    assert entry.name == "old_net_class" and entry.kind.value == "pickle"  # bound under another name
    bundle = capture(shell, "Net().version()\n")
    assert "return 2" in bundle.main_source and "return 1" not in bundle.main_source


def test_source_is_the_definition_that_made_the_object(shell: Any, run_cells: Callable[..., None]) -> None:
    """History holds a later, never-executed definition; linecache points at the one that ran."""
    run_cells(
        "class Net:\n    def version(self):\n        return 'class v1'\ndef tag():\n    return 'tag v1'",
        "if False:\n    class Net:\n        def version(self):\n            return 'class v2'\n"
        "    def tag():\n        return 'tag v2'",
    )
    source = capture(shell, "Net().version(), tag()\n").main_source
    assert "'class v1'" in source and "'tag v1'" in source and "v2" not in source


def test_magic_and_shell_escape_lines_are_refused(shell: Any, run_cells: Callable[..., None]) -> None:
    run_cells("x = 1")
    with pytest.raises(CaptureError) as caught:
        capture_cell(shell.transform_cell("y = x\n!ls\n"), shell.user_ns, cell_line_offset=1)
    assert "cell line 3" in str(caught.value) and "without IPython" in str(caught.value)


def test_ipython_namespace_names_are_not_captured(shell: Any, run_cells: Callable[..., None]) -> None:
    run_cells("z = 3")
    bundle = capture(shell, "with open(__file__) as fh:\n    pass\nexit is not None, z\n")
    assert [c.name for c in bundle.captured] == ["z"]  # IPython's open/exit stand-ins are builtins on workers
    with pytest.raises(UndefinedNameError, match="'nope' at cell line 2"):
        capture(shell, "nope\n")
