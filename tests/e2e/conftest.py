"""Browser-test fixtures: a real `jupyter lab` on loopback, Debian's chromium driven by Playwright.

Everything the server starts (kernels, gang launchers, workers, supervisors) inherits a marker
variable unique to this test session; teardown ends every process that carries it, so nothing
outlives the tests even though nbtrain runs are built to outlive their kernel.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "e2e"
MARKER = "NBTRAIN_E2E_SESSION"
# the browser tests share helpers (test_monitor_usability imports test_monitor_browser's): with
# --import-mode=importlib nothing puts this directory on sys.path
sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: drives a real JupyterLab in chromium (needs /usr/bin/chromium)")


def marked_pids(needle: str) -> list[int]:
    """Live processes whose environment contains the ``NAME=value`` string ``needle``."""
    raw = b"\0" + needle.encode() + b"\0"
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if raw in b"\0" + (entry / "environ").read_bytes() + b"\0":
                state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
                if state not in ("Z", "X"):
                    pids.append(int(entry.name))
        except (OSError, IndexError):
            continue
    return pids


def gang_pids(home: Path) -> list[int]:
    """Gang and supervisor processes of runs stored under ``home`` (the lab's NBTRAIN_HOME)."""
    ours = set(marked_pids(f"NBTRAIN_HOME={home}"))
    gang = set()
    for pid in ours:
        try:
            env = (Path("/proc") / str(pid) / "environ").read_bytes()
        except OSError:
            continue
        if b"\0NBTRAIN_RUN_ID=" in b"\0" + env or b"\0NBTRAIN_SUPERVISOR_OF=" in b"\0" + env:
            gang.add(pid)
    return sorted(gang)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _kill_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


@dataclass
class Lab:
    """A running JupyterLab: where it serves, its notebooks directory and its NBTRAIN_HOME."""

    url: str
    token: str
    root: Path
    home: Path
    log: Path
    settings: Path

    def notebook_url(self, name: str) -> str:
        return f"{self.url}/lab/tree/{name}?reset&token={self.token}"


@pytest.fixture(autouse=True)
def jp_asyncio_loop() -> Iterator[None]:
    """Overrides pytest-jupyter's autouse fixture (tests/conftest.py loads that plugin), which closes the
    current event loop after each test: here that loop belongs to Playwright's sync API."""
    yield None


@pytest.fixture(autouse=True)
def jp_server_cleanup() -> Iterator[None]:
    """Overrides pytest-jupyter's autouse server cleanup: these tests run their own `jupyter lab`."""
    yield None


@pytest.fixture(scope="session")
def chromium_path() -> Path:
    if not CHROMIUM.exists():
        why = f"browser tests need Debian's chromium at {CHROMIUM} (apt-get install -y chromium)"
        if os.environ.get("NBTRAIN_REQUIRE_BROWSER") == "1":  # CI (.ci/run): a browser it failed to install fails
            pytest.fail(f"NBTRAIN_REQUIRE_BROWSER=1 but {why}", pytrace=False)
        pytest.skip(why)
    return CHROMIUM


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


def write_notebook(path: Path, cells: list[str]) -> None:
    """A minimal nbformat-4 notebook of code cells (the python3 kernel)."""
    notebook = {
        "cells": [
            {"cell_type": "code", "execution_count": None, "id": f"cell-{i}", "metadata": {}, "outputs": [],
             "source": source}
            for i, source in enumerate(cells)
        ],
        "metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(notebook, indent=1))


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory, chromium_path: Path) -> Iterator[Lab]:
    """`jupyter lab` on 127.0.0.1 (random port, token) serving a tmp dir with a copy of the quickstart."""
    base = tmp_path_factory.mktemp("lab")
    root, home, settings = base / "notebooks", base / "nbtrain-home", base / "settings"
    root.mkdir()
    shutil.copy(REPO / "examples" / "quickstart.ipynb", root / "quickstart.ipynb")
    # no news/update toasts over the page; the user's own settings are never touched
    notification = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notification.parent.mkdir(parents=True)
    notification.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))

    session = secrets.token_hex(8)
    token = secrets.token_hex(16)
    port = _free_port()
    env = {
        **os.environ,
        MARKER: session,
        "NBTRAIN_HOME": str(home),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "JUPYTER_PLATFORM_DIRS": "1",
    }
    argv = [
        sys.executable, "-m", "jupyterlab", "--no-browser",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
        f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={base / 'workspaces'}",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.append("--allow-root")
    log = base / "jupyter-lab.log"
    with log.open("wb") as out:
        process = subprocess.Popen(argv, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {process.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"jupyter lab did not answer on {url} in 90 s:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)
        yield Lab(url=url, token=token, root=root, home=home, log=log, settings=settings)
    finally:
        # the server first (it asks its kernels to shut down), then everything that carries the marker
        _kill_all([process.pid], signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            left = marked_pids(f"{MARKER}={session}")
            if not left:
                break
            _kill_all(left, sig)
            time.sleep(2)
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(log, ARTIFACTS / "jupyter-lab.log")  # the server and kernel side of a failure


@pytest.fixture(scope="session")
def browser(chromium_path: Path) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium_path), args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest, artifacts: Path) -> Iterator[Any]:
    """A fresh browser page; its console goes to ``<test>-console.txt``, and on failure its last
    screenshot is kept as ``<test>-failed.png``."""
    # tall enough that a whole monitor (triage panel included) fits for the screenshots
    context = browser.new_context(viewport={"width": 1400, "height": 1800})
    context.set_default_timeout(15_000)
    page = context.new_page()
    started = time.monotonic()
    console = (artifacts / f"{request.node.name}-console.txt").open("w")
    page.on("console", lambda m: console.write(f"{time.monotonic() - started:8.2f} {m.type}: {m.text}\n"))
    page.on("pageerror", lambda e: console.write(f"{time.monotonic() - started:8.2f} pageerror: {e}\n"))
    try:
        yield page
    finally:
        console.close()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            try:
                page.screenshot(path=str(artifacts / f"{request.node.name}-failed.png"), full_page=False)
            except Exception:  # noqa: BLE001 - the screenshot is a courtesy; the failure is reported anyway
                pass
        context.close()


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call":
        item.rep_call = report  # type: ignore[attr-defined]


@pytest.fixture
def survivors(lab: Lab) -> Callable[[], list[int]]:
    """``survivors()`` lists live gang/supervisor processes of the lab's runs (tests assert it is empty)."""
    return lambda: gang_pids(lab.home)


@pytest.fixture
def notebook(lab: Lab) -> Callable[[str, list[str]], str]:
    """``notebook(name, cells)`` writes a notebook of code cells into the lab's root; returns its name."""

    def make(name: str, cells: list[str]) -> str:
        write_notebook(lab.root / name, cells)
        return name

    return make
