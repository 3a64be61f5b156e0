"""Read a W&B run's local ``run-<id>.wandb`` file back (offline mode): its history rows, as the W&B service wrote
them. The file is a LevelDB-style log (W&B's own ``datastore`` format) of ``wandb.proto`` ``Record`` messages."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

HEADER = struct.Struct("<4sHB")  # ":W&B", magic 0xBEE1, version
RECORD = struct.Struct("<IHB")  # crc32, length, type (1 full, 2 first, 3 middle, 4 last)
BLOCK = 32768


def records(path: Path) -> list[bytes]:
    """Every record's bytes, chunks joined."""
    data = path.read_bytes()
    ident, magic, _ = HEADER.unpack_from(data, 0)
    assert ident == b":W&B" and magic == 0xBEE1, f"{path} is not a W&B data file"
    out: list[bytes] = []
    pos, pending = HEADER.size, b""
    while pos + RECORD.size <= len(data):
        room = BLOCK - pos % BLOCK
        if room < RECORD.size:  # a block's tail too small for a header is padding
            pos += room
            continue
        _, length, kind = RECORD.unpack_from(data, pos)
        if length == 0 and kind == 0:
            pos += room
            continue
        chunk = data[pos + RECORD.size:pos + RECORD.size + length]
        pos += RECORD.size + length
        pending += chunk
        if kind in (1, 4):
            out.append(pending)
            pending = b""
    return out


def history(run_dir: Path) -> list[dict[str, Any]]:
    """The history rows (``{"_step": 3, "loss": 0.5, ...}``) of the offline run in ``run_dir``."""
    from wandb.proto import wandb_internal_pb2

    [path] = run_dir.glob("run-*.wandb")
    rows = []
    for raw in records(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            rows.append({(item.key or "/".join(item.nested_key)): json.loads(item.value_json)
                         for item in record.history.item})
    return rows
