"""Fixtures of the security tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture
def umask022() -> Iterator[None]:
    """The usual shared-host umask for the test (and every process it starts), restored afterwards."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)
