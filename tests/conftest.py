"""Shared fixtures: an isolated run store per test, and a guard that no gang process outlives a test."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

from procs import pids_with_env

pytest_plugins = ["pytest_jupyter.jupyter_server"]


SHARED_SCOPES = ("module", "class", "package")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist turns the xdist_group marks into node ids (--dist loadgroup)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist's ``--dist loadgroup``, a module whose tests share a fixture wider than one test runs whole.

    A test using a module-, class- or package-scoped fixture (a warm gang, an MLflow server, ...) gets
    ``xdist_group(<its module>)``, so those tests meet on one worker in file order, as in a serial run; every other
    test is scheduled on its own. A test that names its group itself keeps it. Without xdist the marks do nothing.
    """
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        if any(d.scope in SHARED_SCOPES for chain in defs for d in chain):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


def gang_survivors(run_ids: set[str] | None = None) -> list[int]:
    """Live processes of the gangs/supervisors/tracking agents of ``run_ids`` (default: the runs of NBTRAIN_HOME)."""
    if run_ids is None:
        home = os.environ.get("NBTRAIN_HOME")
        runs = Path(home) / "runs" if home else None
        run_ids = {p.name for p in runs.iterdir()} if runs is not None and runs.is_dir() else set()
    if not run_ids:
        return []
    return sorted(set(pids_with_env("NBTRAIN_RUN_ID", run_ids)) | set(pids_with_env("NBTRAIN_SUPERVISOR_OF", run_ids))
                  | set(pids_with_env("NBTRAIN_TRACKING_OF", run_ids)))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh NBTRAIN_HOME; after the test, fail if any gang process is left (and kill it)."""
    root = tmp_path / "nbtrain-home"
    monkeypatch.setenv("NBTRAIN_HOME", str(root))
    monkeypatch.setenv("NBTRAIN_TRACKING", "0")  # MLflow tracking is tested where it is the subject
    yield root
    run_ids = {p.name for p in (root / "runs").iterdir()} if (root / "runs").is_dir() else set()
    deadline = time.monotonic() + 5  # a supervisor that just wrote its verdict is allowed to finish exiting
    leftovers = gang_survivors(run_ids)
    while leftovers and time.monotonic() < deadline:
        time.sleep(0.1)
        leftovers = gang_survivors(run_ids)
    described = [f"{pid} ({_cmdline(pid)})" for pid in leftovers]
    for pid in leftovers:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    assert not leftovers, f"processes left behind by the test: {', '.join(described)}"


def _cmdline(pid: int) -> str:
    """A process's command line, shortened, for the leftover report ("gone" when it ended meanwhile)."""
    try:
        text = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "gone"
    return text[:160]


@pytest.fixture
def survivors() -> object:
    """``survivors()`` lists live gang/supervisor processes (tests assert it is empty)."""
    return gang_survivors


@pytest.fixture
def shell(home: Path) -> Iterator[object]:
    """A real InteractiveShell with ``%load_ext nbtrain`` and an empty user namespace (no kernel, no gang)."""
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.reset(new_session=True)
    ip.run_line_magic("load_ext", "nbtrain")
    yield ip
    ip.reset(new_session=True)
