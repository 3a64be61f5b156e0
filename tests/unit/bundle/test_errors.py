"""Every refusal says what failed, the offending name/value, and the fix — before anything ships."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from nbtrain.bundle import CaptureOptions, capture_cell
from nbtrain.errors import (
    BundleTooLargeError,
    CaptureError,
    CellSyntaxError,
    SecretInBundleError,
    SpecError,
    UndefinedNameError,
    UnpicklableError,
)

Notebook = Callable[..., tuple[dict[str, Any], list[str]]]


def test_syntax_error_reports_the_cell_line() -> None:
    with pytest.raises(CellSyntaxError) as caught:
        capture_cell("x = 1\ny = (x +\nprint(y)\n", {})
    message = str(caught.value)
    assert "cell line 3" in message and "y = (x +" in message and "was never closed" in message
    assert caught.value.lineno == 3
    assert isinstance(caught.value, SyntaxError) and isinstance(caught.value, CaptureError)


def test_syntax_error_with_other_offsets_and_compile_time_errors() -> None:
    with pytest.raises(CellSyntaxError, match=r"cell line 6: invalid syntax"):
        capture_cell("a = 1\nb = = 2\n", {}, cell_line_offset=4)
    with pytest.raises(CellSyntaxError, match=r"cell line 3: 'return' outside function"):
        capture_cell("x = 1\nreturn x\n", {})


def test_undefined_names_are_all_listed_with_their_lines(notebook: Notebook) -> None:
    ns, history = notebook("x = 1\n")
    cell = "print(undefined_a + x)\nundefined_b()\nundefined_a\n"
    with pytest.raises(UndefinedNameError) as caught:
        capture_cell(cell, ns, history=history)
    message = str(caught.value)
    assert "'undefined_a' at cell lines 2, 4" in message
    assert "'undefined_b' at cell line 3" in message
    assert "define it in an earlier cell and run that cell, or define it inside this cell" in message.lower()
    assert isinstance(caught.value, NameError)


def test_undefined_name_inside_a_cell_function(notebook: Notebook) -> None:
    with pytest.raises(UndefinedNameError, match=r"'helperz' at cell line 3"):
        capture_cell("def f():\n    return helperz()\n", {"__name__": "__main__"})


def test_x_equals_x_plus_one_needs_x() -> None:
    with pytest.raises(UndefinedNameError, match="'x' at cell line 2"):
        capture_cell("x = x + 1\n", {})
    assert capture_cell("x = x + 1\n", {"x": 1}).captured[0].name == "x"


def test_undefined_name_in_a_notebook_function_body_is_noted_not_refused(notebook: Notebook) -> None:
    ns, history = notebook("def log(msg):\n    if False:\n        wandb.log(msg)\n    print(msg)\n")
    (entry,) = capture_cell("log('hi')\n", ns, history=history).captured
    assert entry.detail == "function defined in the notebook; uses undefined wandb"


def test_unpicklable_object_is_named_with_its_type(notebook: Notebook) -> None:
    ns, history = notebook("import threading\nlock = threading.Lock()\n")
    with pytest.raises(UnpicklableError) as caught:
        capture_cell("with lock:\n    pass\n", ns, history=history)
    message = str(caught.value)
    assert "'lock'" in message and "_thread.lock" in message and "cannot pickle" in message
    assert "inside the cell" in message


def test_generator_is_unpicklable(notebook: Notebook) -> None:
    ns, history = notebook("batches = (i for i in range(3))\n")
    with pytest.raises(UnpicklableError, match=r"'batches' \(a generator\)"):
        capture_cell("next(batches)\n", ns, history=history)


def test_size_cap_names_the_biggest_objects(notebook: Notebook) -> None:
    ns, history = notebook(
        "import numpy as np\nbig = np.zeros(300_000)\nmedium = np.zeros(100_000)\nsmall = np.zeros(10_000)\n"
        "tiny = np.zeros(10)\n"
    )
    with pytest.raises(BundleTooLargeError) as caught:
        capture_cell("tiny, small, medium, big\n", ns, history=history,
                     options=CaptureOptions(max_pickle_bytes=1024 * 1024))  # fmt: skip
    message = str(caught.value)
    # arrays of numbers: their size is known before pickling, so they are refused without being copied
    assert "take at least 3.1 MB (3280080 bytes) pickled, over the cap of 1.0 MB (1048576 bytes)" in message
    assert "Biggest: big (2.3 MB), medium (781.2 KB), small (78.1 KB)." in message
    assert "--max-capture-mb" in message and "tiny" not in message


def test_size_cap_measured_by_pickling_names_the_biggest_objects(notebook: Notebook) -> None:
    ns, history = notebook(
        "import numpy as np\nbig = [np.zeros(300_000)]\nmedium = [np.zeros(100_000)]\nsmall = [np.zeros(10_000)]\n"
        "tiny = [np.zeros(10)]\n"
    )
    with pytest.raises(BundleTooLargeError) as caught:
        capture_cell("tiny, small, medium, big\n", ns, history=history,
                     options=CaptureOptions(max_pickle_bytes=1024 * 1024))  # fmt: skip
    message = str(caught.value)
    assert "at least" not in message and "over the cap of 1.0 MB (1048576 bytes)" in message
    assert "Biggest: big (2.3 MB), medium (781.3 KB), small (78.2 KB)." in message


def test_secret_from_the_environment_is_refused_without_showing_it(
    notebook: Notebook, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", "s3cr3t-value-0123456789")
    ns, history = notebook("import os\nheader = 'Bearer ' + os.environ['MY_SERVICE_TOKEN']\n")
    with pytest.raises(SecretInBundleError) as caught:
        capture_cell("print(header)\n", ns, history=history)
    message = str(caught.value)
    assert "MY_SERVICE_TOKEN" in message and "'header'" in message and "s3cr3t" not in message
    assert "os.environ" in message and "--allow-secrets" in message
    allowed = capture_cell("print(header)\n", ns, history=history, options=CaptureOptions(allow_secrets=True))
    assert "s3cr3t-value-0123456789" in allowed.main_source


def test_secret_inside_a_pickled_object_or_the_cell_itself(notebook: Notebook, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DB_PASSWORD", "hunter2-but-longer")
    ns, history = notebook(
        "class Conn:\n    def __init__(self):\n        self.pw = 'hunter2-but-longer'\nconn = Conn()\n"
    )
    with pytest.raises(SecretInBundleError, match=r"DB_PASSWORD \(carried by the captured object 'conn'"):
        capture_cell("conn\n", ns, history=history)
    with pytest.raises(SecretInBundleError, match=r"DB_PASSWORD \(carried by the cell's own code"):
        capture_cell("pw = 'hunter2-but-longer'\n", {})
    monkeypatch.setenv("SHORT_KEY", "abc")  # under 8 characters: not treated as a secret
    assert capture_cell("k = 'abc'\n", {})


def test_secret_named_literal_is_refused(notebook: Notebook) -> None:
    ns, history = notebook("API_KEY = 'sk-live-abcdefghijklmnop'\nhf_token = 'hf_xyz'\npad_token = '[PAD]'\n")
    with pytest.raises(SecretInBundleError) as caught:
        capture_cell("print(API_KEY)\n", ns, history=history)
    message = str(caught.value)
    assert "'API_KEY'" in message and "sk-live" not in message and "--allow-secrets" in message
    with pytest.raises(SecretInBundleError, match="'hf_token'"):
        capture_cell("hf_token\n", ns, history=history)
    assert capture_cell("pad_token\n", ns, history=history)  # a tokenizer token, not a credential
    assert capture_cell("API_KEY\n", ns, history=history, options=CaptureOptions(allow_secrets=True))


def test_magic_or_shell_escape_inside_the_cell_is_refused(notebook: Notebook) -> None:
    from IPython.core.inputtransformer2 import TransformerManager

    cell = TransformerManager().transform_cell("x = 1\n!ls\n%time y = 2\n")
    assert "get_ipython()" in cell
    with pytest.raises(CaptureError) as caught:
        capture_cell(cell, {"get_ipython": lambda: None})
    message = str(caught.value)
    assert "cell lines 3, 4" in message and "without IPython" in message


def test_display_is_refused_unless_the_notebook_defines_it(notebook: Notebook) -> None:
    with pytest.raises(CaptureError, match=r"'display' at cell line 2.*print\(\) instead of display\(\)"):
        capture_cell("display(1)\n", {})
    ns, history = notebook("def display(x):\n    print(x)\n")
    assert capture_cell("display(1)\n", ns, history=history).captured[0].kind.value == "source"


def test_bad_options_and_attachments(tmp_path: Any) -> None:
    with pytest.raises(SpecError, match="max_pickle_bytes must be >= 0"):
        CaptureOptions(max_pickle_bytes=-1)
    with pytest.raises(SpecError, match="extra_files must be a tuple"):
        CaptureOptions(extra_files="data.csv")  # type: ignore[arg-type]
    with pytest.raises(CaptureError, match="it is missing"):
        capture_cell("1\n", {}, options=CaptureOptions(extra_files=(str(tmp_path / "nope.csv"),)))
