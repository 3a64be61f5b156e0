"""The JupyterLab plugin in a real `jupyter lab`, driven by Debian's chromium: what issue 7 asks a user can do.

- the "Distributed runs" panel lists a run started from a notebook, live, until it says Succeeded
  (and "Open monitor" shows that run's monitor in the main area, "Attach to run…" in the notebook);
- Cancel in the panel ends the running gang: no process with NBTRAIN_RUN_ID=<run> is left;
- the "Run cell distributed…" dialog writes a correct `%%distributed` line that then runs (and, with the
  event stream blocked, the panel still follows the run by polling);
- "Export notebook as training job" (command palette) produces a job directory.

The lab serves the extension built into the repo (nbtrain/labextension, `npm run build:lab` in
labextension/; the wheel build hook builds it too) through JUPYTER_PATH, ahead of any installed
copy. Screenshots land in test-artifacts/e2e/ (lab-*.png).
"""

from __future__ import annotations

import json
import os
import re
import secrets
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

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
BUILT = REPO / "nbtrain" / "labextension"
MARKER = "NBTRAIN_E2E_LAB_PLUGIN"
TERMINAL = ("succeeded", "failed", "cancelled")

SHORT_CELL = """%%distributed --nodes 1 --gpus 2 --name panel
import time
from accelerate import Accelerator
accelerator = Accelerator()
for step in range(10):
    accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
    time.sleep(0.4)
"""

LONG_CELL = """%%distributed --nodes 1 --gpus 2 --name forever
import time
from accelerate import Accelerator
accelerator = Accelerator()
for step in range(100_000):
    accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
    time.sleep(0.2)
"""

# a plain cell: the dialog writes its magic line (and the %load_ext cell the notebook lacks)
PLAIN_CELL = """import time
from accelerate import Accelerator
accelerator = Accelerator()
print(f"rank {accelerator.process_index} of {accelerator.num_processes}", flush=True)
for step in range(3):
    accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
    time.sleep(0.2)
"""


# -- the lab -------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pids_with(needle: str) -> list[int]:
    """Live processes whose environment holds the exact ``NAME=value`` entry ``needle``."""
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


def run_processes(run_id: str) -> list[int]:
    """The live processes of one run's gang: those whose environment carries NBTRAIN_RUN_ID=<run_id>."""
    return _pids_with(f"NBTRAIN_RUN_ID={run_id}")


def supervisor_processes(run_id: str) -> list[int]:
    return _pids_with(f"NBTRAIN_SUPERVISOR_OF={run_id}")


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


@dataclass
class PluginLab:
    url: str
    token: str
    root: Path
    home: Path

    def open_url(self, notebook: str | None = None) -> str:
        where = f"/lab/tree/{notebook}" if notebook else "/lab"
        return f"{self.url}{where}?reset&token={self.token}"

    def api(self, path: str, method: str = "GET") -> Any:
        request = urllib.request.Request(f"{self.url}{path}?token={self.token}", method=method)
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        return json.loads(body) if body else None

    def write_notebook(self, name: str, cells: list[str]) -> str:
        notebook = {
            "cells": [
                {"cell_type": "code", "execution_count": None, "id": f"cell-{i}", "metadata": {}, "outputs": [],
                 "source": source}
                for i, source in enumerate(cells)
            ],
            "metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                                        "name": "python3"}},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
        (self.root / name).write_text(json.dumps(notebook, indent=1))
        return name

    def shutdown_kernels(self) -> None:
        """Free the two CPUs for the next test."""
        for session in self.api("/api/sessions"):
            self.api(f"/api/sessions/{session['id']}", method="DELETE")


@pytest.fixture(scope="module")
def plugin_lab(tmp_path_factory: pytest.TempPathFactory, chromium_path: Path, artifacts: Path) -> Iterator[PluginLab]:
    """`jupyter lab` on 127.0.0.1 (random port, token) with the repo's built extension first on JUPYTER_PATH.

    Every process it starts carries a marker variable; teardown ends them all (runs outlive kernels by design).
    """
    if not (BUILT / "package.json").is_file():
        pytest.fail(f"the JupyterLab extension is not built ({BUILT} is missing): run `npm ci && npm run build:lab` "
                    "in labextension/, or `pip install -e .` (its build hook runs them)")
    base = tmp_path_factory.mktemp("plugin-lab")
    root, home, settings, jupyter_path = base / "notebooks", base / "nbtrain-home", base / "settings", base / "jpath"
    root.mkdir()
    (jupyter_path / "labextensions").mkdir(parents=True)
    (jupyter_path / "labextensions" / "nbtrain").symlink_to(BUILT, target_is_directory=True)
    notification = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notification.parent.mkdir(parents=True)
    notification.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))

    session, token, port = secrets.token_hex(8), secrets.token_hex(16), _free_port()
    env = {
        **os.environ,
        MARKER: session,
        "NBTRAIN_HOME": str(home),
        "JUPYTER_PATH": os.pathsep.join(filter(None, [str(jupyter_path), os.environ.get("JUPYTER_PATH")])),
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
        yield PluginLab(url=url, token=token, root=root, home=home)
    finally:
        _signal_all([process.pid], signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            left = _pids_with(f"{MARKER}={session}")
            if not left:
                break
            _signal_all(left, sig)
            time.sleep(2)
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        (artifacts / "lab-plugin-server.log").write_bytes(log.read_bytes())


# -- driving the page ----------------------------------------------------------------------------


def poll(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.25) -> Any:
    """Call ``check`` until it returns something truthy; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what} (last seen: {last!r})")


def open_lab(page: Any, lab: PluginLab, notebook: str | None = None) -> None:
    """Open the lab (a notebook in it) on a reset workspace and wait until the status bar says Idle."""
    page.goto(lab.open_url(notebook))
    statusbar = page.locator("#jp-main-statusbar")
    statusbar.wait_for(timeout=60_000)
    if notebook:
        page.locator(".jp-NotebookPanel").first.wait_for(timeout=60_000)
        pattern = r"^(?!No Kernel).+ \| Idle$"  # "<kernel> | Idle" once the kernel is up
    else:
        pattern = r"\| Idle$|Idle"
    poll(lambda: re.search(pattern, statusbar.inner_text(), re.MULTILINE), 90, "an idle status bar")


def run_all(page: Any) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()


def show_runs_panel(page: Any) -> Any:
    """Click the left sidebar's "Distributed runs" tab (unless it is open); returns the panel."""
    panel = page.get_by_test_id("nbtrain-runs-panel")
    if not panel.is_visible():
        page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab[data-id='nbtrain-runs']").click()
    panel.wait_for(state="visible", timeout=10_000)
    return panel


def run_rows(panel: Any) -> Any:
    return panel.locator("li.nbtrain-Run")


def only_run(panel: Any, timeout: float = 120) -> tuple[Any, str]:
    """Wait for the panel to list exactly one run; returns its row and id."""
    rows = run_rows(panel)
    poll(lambda: rows.count() == 1, timeout, "the panel to list the notebook's run")
    row = rows.first
    return row, str(row.get_attribute("data-run-id"))


def row_state(row: Any) -> str:
    return str(row.get_attribute("data-state") or "")


def palette(page: Any, label: str) -> None:
    """Run a command from the command palette by its label."""
    page.keyboard.press("Control+Shift+C")
    search = page.locator(".jp-mod-commandPalette .lm-CommandPalette-input, #command-palette .lm-CommandPalette-input")
    search.first.wait_for(state="visible", timeout=10_000)
    search.first.fill(label)
    item = page.locator(".lm-CommandPalette-item", has_text=label).first
    item.wait_for(state="visible", timeout=10_000)
    item.click()


def dialog_button(page: Any, label: str) -> Any:
    return page.locator(".jp-Dialog .jp-Dialog-button", has_text=re.compile(rf"^{re.escape(label)}$"))


def cell_sources(page: Any) -> list[str]:
    """The text of every cell editor of the open notebook, in order."""
    return page.locator(".jp-NotebookPanel .jp-Cell .jp-InputArea-editor").all_inner_texts()


# -- tests ---------------------------------------------------------------------------------------


def test_panel_follows_a_notebook_run_to_succeeded(page: Any, plugin_lab: PluginLab, artifacts: Path) -> None:
    lab = plugin_lab
    name = lab.write_notebook("panel.ipynb", ["%load_ext nbtrain", SHORT_CELL])
    open_lab(page, lab, name)
    panel = show_runs_panel(page)
    status = page.get_by_test_id("nbtrain-status-active")
    assert status.inner_text() == "nbtrain: 0 active runs"
    assert panel.get_attribute("data-connection") == "stream", "the panel should follow the server-sent events"
    run_all(page)

    row, run_id = only_run(panel)
    seen = [row_state(row)]
    while seen[-1] not in TERMINAL and len(seen) < 2000:
        if seen[-1] == "running" and "running" not in seen[:-1]:
            assert status.inner_text() == "nbtrain: 1 active run"
            panel.screenshot(path=str(artifacts / "lab-panel-running.png"))
        time.sleep(0.1)
        seen.append(row_state(row))
    assert seen[-1] == "succeeded", f"{run_id} ended {seen[-1]} (failure: {row.inner_text()})"
    assert [s for s in seen if s not in TERMINAL], f"the panel never showed {run_id} before it ended: {seen}"

    assert row.get_by_test_id("nbtrain-run-state").inner_text() == "Succeeded"
    text = row.inner_text()
    assert run_id in text and "local · 1 × 2 = 2 ranks" in text, text
    assert re.search(r"started \d\d:\d\d:\d\d", text), text
    assert re.fullmatch(r"\d+ s|\d+ m \d\d s", row.get_by_test_id("nbtrain-run-duration").inner_text()), text
    poll(lambda: status.inner_text() == "nbtrain: 0 active runs", 10, "the status bar to count no active run")
    assert row.get_by_test_id("nbtrain-run-cancel").is_disabled()
    assert row.get_by_test_id("nbtrain-run-resume").is_disabled()  # nothing to resume: it succeeded
    panel.screenshot(path=str(artifacts / "lab-panel-succeeded.png"))

    # "Copy code": the attach code of this very run on the clipboard
    row.get_by_test_id("nbtrain-run-copy").click()
    page.locator(".Toastify__toast", has_text=f"Copied the code that attaches to {run_id}").wait_for(timeout=10_000)

    # "Monitor": the run's monitor widget in a console tab of the main area
    row.get_by_test_id("nbtrain-run-monitor").click()
    console = page.locator(f".jp-ConsolePanel.nbtrain-MonitorConsole[data-nbtrain-run='{run_id}']")
    console.wait_for(timeout=30_000)
    monitor = console.locator(f"[data-testid='nbtrain-monitor'][data-run-id='{run_id}']")
    monitor.wait_for(timeout=90_000)
    poll(lambda: monitor.get_attribute("data-state") == "succeeded", 30, "the monitor to say succeeded")
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current", has_text=f"Monitor {run_id}").wait_for()
    page.wait_for_timeout(500)
    page.screenshot(path=str(artifacts / "lab-monitor-console.png"))
    # closing the monitor's tab shuts its kernel down
    assert [s for s in lab.api("/api/sessions") if s["type"] == "console"], "the monitor runs on a console session"
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text=f"Monitor {run_id}").locator(
        ".lm-TabBar-tabCloseIcon").click()
    poll(lambda: not [s for s in lab.api("/api/sessions") if s["type"] == "console"], 20,
         "the monitor's kernel to shut down with its tab")

    # "Attach to run…" from the palette, in the notebook: a new cell with the attach code, run
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text=name).click()
    page.locator(".jp-NotebookPanel-notebook .jp-Cell").last.click()
    palette(page, "Attach to run…")
    dialog_button(page, "Attach").click()
    poll(lambda: any(f"nbtrain.attach({run_id!r})" in s for s in cell_sources(page)), 15, "the attach cell")
    attached = page.locator(".jp-NotebookPanel .jp-CodeCell").last.locator(
        f"[data-testid='nbtrain-monitor'][data-run-id='{run_id}']")
    attached.wait_for(timeout=60_000)
    lab.shutdown_kernels()


def test_cancel_from_the_panel_ends_the_gang(page: Any, plugin_lab: PluginLab, artifacts: Path) -> None:
    lab = plugin_lab
    name = lab.write_notebook("cancel.ipynb", ["%load_ext nbtrain", LONG_CELL])
    open_lab(page, lab, name)
    panel = show_runs_panel(page)
    run_all(page)
    row = panel.locator("li.nbtrain-Run", has_text="forever")
    row.wait_for(timeout=120_000)
    run_id = str(row.get_attribute("data-run-id"))
    poll(lambda: row_state(row) == "running", 120, f"{run_id} to run")
    poll(lambda: len(run_processes(run_id)) >= 2, 30, f"the gang processes of {run_id}")
    status = page.get_by_test_id("nbtrain-status-active")
    assert status.inner_text() == "nbtrain: 1 active run"

    row.get_by_test_id("nbtrain-run-cancel").click()
    page.locator(".jp-Dialog").wait_for()
    page.screenshot(path=str(artifacts / "lab-cancel-confirm.png"))
    dialog_button(page, "Cancel run").click()
    poll(lambda: row_state(row) == "cancelled", 60, f"the panel to show {run_id} cancelled")
    assert row.get_by_test_id("nbtrain-run-state").inner_text().startswith("Cancelled")
    # the cancel answer comes once the supervisor has ended the gang: nothing of the run may be left
    assert not run_processes(run_id), f"processes of {run_id} left after cancel: {run_processes(run_id)}"
    poll(lambda: not supervisor_processes(run_id), 10, f"the supervisor of {run_id} to exit")
    assert lab.api(f"/nbtrain/runs/{run_id}")["state"] == "cancelled"
    poll(lambda: status.inner_text() == "nbtrain: 0 active runs", 10, "the status bar to count no active run")
    panel.screenshot(path=str(artifacts / "lab-panel-cancelled.png"))
    lab.shutdown_kernels()


def test_run_cell_distributed_dialog_writes_a_line_that_runs(
    page: Any, plugin_lab: PluginLab, artifacts: Path
) -> None:
    lab = plugin_lab
    # this page gets no event stream (a proxy that buffers it, say): the panel must fall back to polling
    page.route("**/nbtrain/events*", lambda route: route.abort())
    name = lab.write_notebook("dialog.ipynb", [PLAIN_CELL])
    open_lab(page, lab, name)
    cell = page.locator(".jp-NotebookPanel .jp-CodeCell").first
    cell.locator(".jp-InputPrompt").click()

    # the cell context menu offers it
    cell.locator(".jp-InputArea-editor").click(button="right")
    item = page.locator(".lm-Menu-item", has_text="Run cell distributed…")
    item.wait_for(timeout=10_000)
    page.keyboard.press("Escape")

    # the notebook toolbar's button opens the dialog
    page.locator(".jp-NotebookPanel-toolbar [data-jp-item-name='nbtrain-run-distributed'] button").click()
    page.locator(".jp-Dialog").wait_for()
    page.get_by_test_id("nbtrain-dialog-nodes").fill("1")
    page.get_by_test_id("nbtrain-dialog-gpus").fill("2")
    page.get_by_test_id("nbtrain-dialog-backend").select_option("local")
    page.get_by_test_id("nbtrain-dialog-strategy").select_option("ddp")
    line = "%%distributed --nodes 1 --gpus 2 --backend local --strategy ddp"
    poll(lambda: page.get_by_test_id("nbtrain-dialog-preview").inner_text() == line, 5, "the dialog's preview")
    page.locator(".jp-Dialog-content").screenshot(path=str(artifacts / "lab-dialog.png"))
    dialog_button(page, "Run").click()

    sources = poll(lambda: (s := cell_sources(page)) and len(s) == 2 and s, 10, "the cells the dialog wrote")
    assert sources[0].strip() == "%load_ext nbtrain", sources
    assert sources[1].splitlines()[0] == line, sources[1]
    assert sources[1].rstrip("\n").splitlines()[1:] == PLAIN_CELL.rstrip("\n").splitlines()

    monitor = page.locator(".jp-NotebookPanel .jp-CodeCell").nth(1).locator("[data-testid='nbtrain-monitor']")
    monitor.wait_for(timeout=120_000)
    run_id = str(monitor.get_attribute("data-run-id"))
    poll(lambda: monitor.get_attribute("data-state") in TERMINAL, 120, f"{run_id} to end")
    assert monitor.get_attribute("data-state") == "succeeded", monitor.inner_text()
    run = lab.api(f"/nbtrain/runs/{run_id}")
    assert (run["nodes"], run["procs"], run["world_size"], run["backend"]) == (1, 2, 2, "local"), run
    assert run["spec"]["strategy"] == "ddp", run["spec"]
    panel = show_runs_panel(page)
    row = panel.locator(f"li.nbtrain-Run[data-run-id='{run_id}']")
    poll(lambda: row_state(row) == "succeeded", 15, "the polling panel to show the run succeeded")
    assert panel.get_attribute("data-connection") == "polling"
    page.screenshot(path=str(artifacts / "lab-dialog-ran.png"))
    lab.shutdown_kernels()


def test_export_command_writes_a_job_directory(page: Any, plugin_lab: PluginLab, artifacts: Path) -> None:
    lab = plugin_lab
    name = lab.write_notebook("exported.ipynb", ["%load_ext nbtrain", SHORT_CELL])
    open_lab(page, lab, name)
    page.locator(".jp-NotebookPanel .jp-Cell").first.click()
    palette(page, "Export notebook as training job")
    # the user is on the %load_ext cell: the server exports the notebook's one %%distributed cell and the toast names
    # it (by position: the 140-character notification keeps the key files)
    toast = page.locator(".Toastify__toast", has_text=re.compile(r"xported cell 2 of exported\.ipynb to exported-job/:"))
    toast.wait_for(timeout=60_000)
    job = lab.root / "exported-job"
    assert job.is_dir(), sorted(p.name for p in lab.root.iterdir())
    files = {p.name for p in job.iterdir()}
    assert "train.py" in files, files
    assert "%%distributed" not in (job / "train.py").read_text()
    # the key files by name, the rest counted (a notification's text is cut at 140 characters)
    assert "train.py, README.md, job.sbatch and " in toast.inner_text(), toast.inner_text()
    assert f" and {len(files) - 3} more" in toast.inner_text(), (toast.inner_text(), sorted(files))
    page.screenshot(path=str(artifacts / "lab-export.png"))
    lab.shutdown_kernels()
