"""What the static index makes of each kind of top-level statement (nothing is executed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from nbtrain.export.index import Kind, index_cells
from nbtrain.export.notebook import NotebookCell
from nbtrain.export.static import export_notebook

from .conftest import run_train


def _index(*sources: str) -> dict[str, tuple[Kind, str]]:
    cells = [NotebookCell(i + 1, f"c{i}", s) for i, s in enumerate(sources)]
    return {n: (b.kind, b.text) for n, b in index_cells(cells).bindings.items()}


def test_imports_definitions_literals() -> None:
    found = _index(
        "import os.path\nimport numpy as np, json\nfrom collections import OrderedDict as OD",
        "@staticmethod\ndef f():\n    return 1\n\nclass C:\n    pass\n\nN: int = 3\nT = (1, 'a', None)",
    )
    assert found["os"] == (Kind.IMPORT, "import os.path")
    assert found["np"] == (Kind.IMPORT, "import numpy as np") and found["json"] == (Kind.IMPORT, "import json")
    assert found["OD"] == (Kind.IMPORT, "from collections import OrderedDict as OD")
    assert found["f"][0] is Kind.DEFINITION and found["f"][1].startswith("@staticmethod\ndef f():")
    assert found["C"][0] is Kind.DEFINITION
    assert found["N"][0] is Kind.LITERAL and found["T"][0] is Kind.LITERAL


def test_computed_mutated_and_deleted() -> None:
    found = _index(
        "try:\n    import fancy\nexcept ImportError:\n    fancy = None",
        "cfg = {'lr': 1}\ncfg['lr'] = 2\ncount = 1\ncount += 1\nitems = []\nitems.append(3)",
        "model = make()\nmodel = model.to('cpu')\ngone = 1\ndel gone\nimport numpy as np\nnp.random.seed(0)",
    )
    assert found["fancy"][0] is Kind.COMPUTED and found["fancy"][1].startswith("try:")
    assert found["cfg"] == (Kind.COMPUTED, "cfg = {'lr': 1}\ncfg['lr'] = 2\n")
    assert found["count"] == (Kind.COMPUTED, "count = 1\ncount += 1\n")
    assert found["items"] == (Kind.COMPUTED, "items = []\nitems.append(3)\n")
    assert found["model"] == (Kind.COMPUTED, "model = make()\nmodel = model.to('cpu')\n")
    assert "gone" not in found
    assert found["np"] == (Kind.IMPORT, "import numpy as np")  # module calls are not mutations


def test_shared_statement_is_written_once(notebook_file: Callable[..., Path], tmp_path: Path,
                                          no_k8s: None) -> None:
    path = notebook_file(
        "def pair():\n    return 2, 3",
        "low, high = pair()",
        "%%distributed\nprint('SPAN', low, high)",
    )
    export_notebook(path, tmp_path / "job")
    train = (tmp_path / "job" / "train.py").read_text()
    assert train.count("low, high = pair()") == 1
    assert train.index("def pair()") < train.index("low, high = pair()")
    assert "SPAN 2 3" in run_train(tmp_path / "job").stdout


def test_a_loop_that_changes_a_value_marks_it() -> None:
    cells = [NotebookCell(1, None, "items = []\nfor i in range(3):\n    items.append(i)\nd = {}\nif True:\n    d['a'] = 1")]
    bindings = index_cells(cells).bindings
    assert bindings["items"].problem == "assigned or changed inside a top-level loop"
    assert bindings["d"].kind is Kind.COMPUTED and bindings["d"].problem is None
    assert bindings["d"].text == "d = {}\nif True:\n    d['a'] = 1\n"


@pytest.mark.parametrize("source", ["%%bash\necho hi", "def broken(:\n    pass"])
def test_unreadable_cells_are_skipped(source: str) -> None:
    cells = [NotebookCell(1, None, source)]
    index = index_cells(cells)
    assert not index.bindings and index.skipped[0][0].position == 1
