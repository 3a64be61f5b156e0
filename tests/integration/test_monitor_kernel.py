"""The monitor's transport in a real kernel: what reaches the front end, how often, and how much."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

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


def test_monitor_streams_bounded_updates_and_final_summary(home: Path, tmp_path: Path, kernel_factory: Any) -> None:
    kernel = kernel_factory(tmp_path)
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
        # the grid's steps come from the same accelerator.log calls as the chart
        final_grid = [u["state"]["ranks"] for u in updates if "ranks" in u["state"]][-1]
        assert [cell[2] for node in final_grid["nodes"] for cell in node["ranks"]] == [29, 29]
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


NUMBERED = '''%%distributed --nodes 1 --gpus 2 --name survivor --out run
import time
from accelerate import Accelerator
accelerator = Accelerator()
for i in range(1, 151):
    print(f"rank {accelerator.process_index} line {i}", flush=True)
    accelerator.log({"loss": 1.0 / i}, step=i)
    time.sleep(0.04)
'''


def test_attach_after_the_kernel_is_killed_delivers_every_line_once(home: Path, tmp_path: Path,
                                                                    kernel_factory: Any) -> None:
    first = kernel_factory(tmp_path)
    first.execute("%load_ext nbtrain")
    first.execute(NUMBERED)
    run_id = next(m["content"]["text"].split(":")[0] for m in first.messages
                  if m["msg_type"] == "stream" and "submitted" in m["content"].get("text", ""))
    time.sleep(2.5)  # the gang is mid-way
    os.kill(first.pid, signal.SIGKILL)  # no clean-up code of the kernel runs
    first.client.stop_channels()
    second = kernel_factory(tmp_path)
    second.execute(f"import nbtrain\nrun = nbtrain.attach({run_id!r})\nrun.show()\nrun.wait(progress=False)")
    second.execute("import json\nm = run.monitor()._model\n"
                   "print('@@' + json.dumps({r: [list(x) for x in m.recent(r)] for r in m.line_counts}))\n"
                   "print('@@' + json.dumps(m.line_counts))")
    printed = [m["content"]["text"] for m in second.messages if m["msg_type"] == "stream"]
    payloads = [line[2:] for text in printed for line in text.splitlines() if line.startswith("@@")]
    import json

    recent, counts = json.loads(payloads[-2]), json.loads(payloads[-1])
    for rank in ("0", "1"):
        assert counts[rank] == 150
        assert [text for _, text in recent[rank]] == [f"rank {rank} line {i}" for i in range(1, 151)]
        assert [index for index, _ in recent[rank]] == list(range(150))
