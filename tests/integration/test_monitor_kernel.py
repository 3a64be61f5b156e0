"""The monitor's transport in a real kernel: what reaches the front end, how often, and how much."""

from __future__ import annotations

import queue
import time
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import start_new_kernel

pytestmark = pytest.mark.slow

CELL = '''%%distributed --nodes 1 --gpus 2 --name watched --out run
import time
from accelerate import Accelerator
accelerator = Accelerator()
for step in range(30):
    accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
    print(f"rank {accelerator.process_index} step {step}", flush=True)
    time.sleep(0.1)
'''


class Kernel:
    """A real ipykernel plus the iopub messages it sent, grouped by what a front end would see."""

    def __init__(self, cwd: Path) -> None:
        self.manager, self.client = start_new_kernel(kernel_name="python3", cwd=str(cwd))
        self.messages: list[dict[str, Any]] = []

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
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


def test_monitor_streams_bounded_updates_and_final_summary(home: Path, tmp_path: Path) -> None:
    kernel = Kernel(tmp_path)
    try:
        kernel.execute("%load_ext nbtrain")
        kernel.execute(CELL)
        opens = [m for m in kernel.messages if m["msg_type"] == "comm_open"
                 and m["content"]["data"]["state"].get("_anywidget_id") == "nbtrain.widgets.monitor.MonitorWidget"]
        assert opens and opens[0]["content"]["data"]["state"]["header"]["name"] == "watched"
        assert len(opens) == 1, "the %%distributed cell displays one monitor widget"
        comm_id = opens[0]["content"]["comm_id"]
        displayed = [m for m in kernel.messages if m["msg_type"] == "display_data"]
        assert displayed and "application/vnd.jupyter.widget-view+json" in displayed[-1]["content"]["data"]
        started = time.monotonic()
        kernel.execute("run.wait()")
        traffic = kernel.comm_messages(comm_id)
        span = max(1.0, traffic[-1]["received"] - started) if traffic else 1.0
        updates = [m["content"]["data"] for m in traffic if m["content"]["data"].get("method") == "update"]
        batches = [m["content"]["data"]["content"] for m in traffic if m["content"]["data"].get("method") == "custom"]
        # the last trait sync carries the final state; the batches carried every rank's lines and the points
        final_header = [u["state"]["header"] for u in updates if "header" in u["state"]][-1]
        assert final_header["state"] == "succeeded" and final_header["step"] == 29
        lines = [tuple(x) for b in batches if b["type"] == "batch" for x in b["lines"]]
        assert {(r, i) for r, i, _ in lines} == {(r, i) for r in (0, 1) for i in range(len(lines) // 2)}
        assert any(text == "rank 1 step 29" for _, _, text in lines)
        points = [p for b in batches if b["type"] == "batch" for p in b["points"].get("loss", [])]
        assert [p[0] for p in points] == list(range(30))
        # bounded: at most ~6 messages a second for this widget, each small
        assert len(traffic) / span <= 10, (len(traffic), span)
        assert max(len(str(m["content"])) for m in traffic) < 200_000
        # the cell that waited refreshed the displayed monitor: its text/plain is the final summary
        refreshed = [m for m in kernel.messages if m["msg_type"] == "update_display_data"]
        assert refreshed and "succeeded" in refreshed[-1]["content"]["data"]["text/plain"]
        assert "world size 2" in refreshed[-1]["content"]["data"]["text/plain"]

        # a (re)connecting front end says hello and gets a snapshot; older lines come in pages
        before = len(kernel.messages)
        kernel.execute("w = run.monitor()\nw._on_front_end_message(w, {'type': 'hello'}, [])\n"
                       "w._on_front_end_message(w, {'type': 'page', 'rank': 1, 'before': 10, 'limit': 5}, [])")
        replies = [m["content"]["data"]["content"] for m in kernel.messages[before:]
                   if m["msg_type"] == "comm_msg" and m["content"]["data"].get("method") == "custom"]
        snapshot = next(r for r in replies if r["type"] == "snapshot")
        assert len(snapshot["points"]["loss"]) == 30 and snapshot["lines"]["1"][-1][1] == "rank 1 step 29"
        page = next(r for r in replies if r["type"] == "page")
        assert page["start"] == 5 and len(page["lines"]) == 5 and not page["eof"]
    finally:
        kernel.close()
