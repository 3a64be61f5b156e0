"""Fixtures for the bundle tests: fake and real notebook namespaces, and running a written main.py."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nbtrain.bundle import Bundle

# Runs main.py as a worker would (a fresh __main__, __file__ set) and prints the result's repr last.
_DRIVER = (
    "import runpy, sys\n"
    "g = runpy.run_path(sys.argv[1], run_name='__main__')\n"
    "print('RESULT=' + repr(g.get('__nbtrain_result__')))\n"
)

Namespace = tuple[dict[str, Any], list[str]]


@pytest.fixture
def notebook() -> Callable[..., Namespace]:
    """``notebook(cell, cell, ...)`` -> (namespace, history): cells exec'd in one ``__main__`` dict.

    Like a notebook without IPython: ``inspect`` cannot find the source, so history is the fallback.
    """

    def make(*cells: str) -> Namespace:
        ns: dict[str, Any] = {"__name__": "__main__"}
        for i, cell in enumerate(cells):
            exec(compile(cell, f"<fake-cell-{i}>", "exec"), ns)
        return ns, ["", *cells]

    return make


@pytest.fixture
def shell() -> Iterator[Any]:
    """A real IPython shell (history in memory), reset after each test."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    sh = InteractiveShell.instance(config=config)
    yield sh
    sh.reset(new_session=True)  # leave the (singleton) shell clean for whoever uses it next


@pytest.fixture
def run_cells(shell: Any) -> Callable[..., None]:
    """``run_cells(code, ...)`` runs each as a notebook cell (stored in ``In``); fails on error."""

    def run(*cells: str) -> None:
        for cell in cells:
            result = shell.run_cell(cell, store_history=True)
            result.raise_error()

    return run


@pytest.fixture
def run_bundle(tmp_path: Path) -> Callable[[Bundle], tuple[str, str]]:
    """Write the bundle and run ``python main.py`` in a fresh interpreter, from another directory.

    Returns (stdout without the result line, repr of ``__nbtrain_result__``); fails on a non-zero exit.
    """

    def run(bundle: Bundle) -> tuple[str, str]:
        directory = bundle.write(tmp_path / "bundles")
        proc = subprocess.run(
            [sys.executable, "-c", _DRIVER, str(directory / "main.py")],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, f"main.py failed:\n{proc.stderr}\n--- main.py ---\n{bundle.main_source}"
        out, _, result = proc.stdout.rpartition("RESULT=")
        return out, result.strip()

    return run
