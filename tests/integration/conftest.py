"""Fixtures for integration tests: a real IPython shell with nbtrain loaded, against an isolated store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def shell(home: Path) -> Iterator[Any]:
    """A real InteractiveShell with ``%load_ext nbtrain`` and an empty user namespace."""
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.reset(new_session=True)
    ip.run_line_magic("load_ext", "nbtrain")
    yield ip
    ip.reset(new_session=True)


def _run_cell(ip: Any, source: str) -> Any:
    result = ip.run_cell(source, store_history=True)
    if result.error_before_exec is not None:
        raise result.error_before_exec
    if result.error_in_exec is not None:
        raise result.error_in_exec
    return result.result


@pytest.fixture
def run_cell(shell: Any) -> Any:
    """``run_cell(source)`` runs one cell in :func:`shell` and re-raises its error (IPython only prints it)."""
    return lambda source: _run_cell(shell, source)
