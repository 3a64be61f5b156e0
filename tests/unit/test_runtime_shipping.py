"""The runtime runs from its shipped files alone, and can report events on stdout (no shared disk)."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import cloudpickle

from nbtrain.bundle import capture_cell
from nbtrain.events import EventKind, encode_event_key, event_tag, new_event_key, parse_stream_line
from nbtrain.runtime.shipping import runtime_files


def test_shipped_runtime_runs_a_bundle_and_streams_events(tmp_path: Path) -> None:
    runtime_root = tmp_path / "runtime"
    for rel, content in runtime_files().items():
        target = runtime_root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    bundle_dir = capture_cell(
        "import nbtrain, sys\nprint('nbtrain from', nbtrain.__file__)\nnbtrain.log(step=0, loss=0.5)\nVALUE * 2\n",
        {"__name__": "__main__", "VALUE": 21},
    ).write(tmp_path / "bundles")
    key = new_event_key()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NBTRAIN_")}
    env.update(PYTHONPATH=str(runtime_root), NBTRAIN_RUN_ID="r-1", NBTRAIN_EVENT_STREAM="stdout", RANK="0",
               PYTHONNOUSERSITE="1", NBTRAIN_EVENT_KEY=encode_event_key(key))
    # -S would drop torch too; instead prove the shipped copy is the one imported
    out = subprocess.run([sys.executable, "-m", "nbtrain.runtime.worker", str(bundle_dir)], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    events = []
    texts = []
    for line in out.stdout.splitlines():
        _, event, text = parse_stream_line(line, key=key)
        if event is not None:
            events.append(event)
        elif text:
            texts.append(text)
    assert any(t.startswith(f"nbtrain from {runtime_root}") for t in texts), texts
    kinds = [e.kind for e in events]
    assert kinds[0] is EventKind.RANK_START and EventKind.RANK_DONE in kinds
    metric = next(e for e in events if e.kind is EventKind.METRIC)
    assert metric.data == {"step": 0, "values": {"loss": 0.5}}
    result = next(e for e in events if e.kind is EventKind.RESULT)
    assert cloudpickle.loads(base64.b64decode(result.data["pickle_b64"])) == 42


def test_parse_stream_line_reads_torchelastic_prefixes() -> None:
    key = bytes(range(32))
    assert parse_stream_line("[rank3]: hello", key=key) == (3, None, " hello")
    assert parse_stream_line("[default1]:hi", key=key)[0] == 1
    text = '{"v":1,"kind":"heartbeat","src":"rank-2","seq":4,"t":1.0,"attempt":0,"rank":2,"data":{"step":null}}'
    rank, event, rest = parse_stream_line(f"[rank2]:@@nbtrain-event@@ {event_tag(key, text)} {text}", key=key)
    assert rank == 2 and rest == "" and event is not None and event.kind is EventKind.HEARTBEAT
    # the marker counts only at the start of a line: text printed before it makes the whole line text
    rank, event, rest = parse_stream_line(f"[rank2]:partial@@nbtrain-event@@ {event_tag(key, text)} {text}", key=key)
    assert rank == 2 and event is None and rest.startswith("partial@@nbtrain-event@@ ")
