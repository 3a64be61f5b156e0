"""Fixtures for integration tests: a real IPython shell with nbtrain loaded, against an isolated store."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import start_new_kernel


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


class Kernel:
    """A real ipykernel plus the iopub messages it sent, grouped by what a front end would see."""

    def __init__(self, cwd: Path) -> None:
        self.manager, self.client = start_new_kernel(kernel_name="python3", cwd=str(cwd))
        self.pid = int(self.manager.provisioner.pid)  # type: ignore[union-attr]
        self.messages: list[dict[str, Any]] = []
        self.closed = False

    def execute(self, code: str, timeout: float = 180) -> dict[str, Any]:
        msg_id = self.client.execute(code)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                msg = self.client.get_iopub_msg(timeout=1)
            except queue.Empty:
                continue
            msg["received"] = time.monotonic()
            self.messages.append(msg)
            if (msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle"
                    and msg["parent_header"].get("msg_id") == msg_id):
                reply = self.client.get_shell_msg(timeout=10)
                assert reply["content"]["status"] == "ok", reply["content"]
                return reply
        raise TimeoutError(code)

    def comm_messages(self, comm_id: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == comm_id]

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.client.stop_channels()
        if self.manager.is_alive():
            self.manager.shutdown_kernel(now=True)
        else:
            self.manager.cleanup_resources()


@pytest.fixture
def kernel_factory() -> Iterator[Any]:
    """``kernel_factory(cwd)`` starts a real ipykernel (see :class:`Kernel`); all are shut down after the test."""
    started: list[Kernel] = []

    def make(cwd: Path) -> Kernel:
        kernel = Kernel(cwd)
        started.append(kernel)
        return kernel

    yield make
    for kernel in started:
        kernel.close()
