"""GPU inventory of this machine, without importing torch (``%load_ext`` must stay fast)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

__all__ = ["GpuInventory", "detect_gpus"]


@dataclass(frozen=True)
class GpuInventory:
    """Visible GPU ids (as CUDA_VISIBLE_DEVICES would name them) and their model names."""

    ids: tuple[str, ...] = ()
    names: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        """Number of usable GPUs."""
        return len(self.ids)


def detect_gpus() -> GpuInventory:
    """Ask ``nvidia-smi`` (5 s limit); honour an existing CUDA_VISIBLE_DEVICES. No GPU: empty inventory."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return GpuInventory()
    try:
        out = subprocess.run(
            [smi, "--query-gpu=index,uuid,name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return GpuInventory()
    return parse_inventory(out, os.environ.get("CUDA_VISIBLE_DEVICES"))


def parse_inventory(smi_csv: str, visible: str | None) -> GpuInventory:
    """Inventory from ``nvidia-smi --query-gpu=index,uuid,name`` output, filtered by CUDA_VISIBLE_DEVICES.

    CUDA_VISIBLE_DEVICES may name GPUs by index or by UUID (``GPU-…``, also MIG ``MIG-…`` prefixes);
    the kept GPUs are returned in the order CUDA_VISIBLE_DEVICES lists them.
    """
    rows = [[part.strip() for part in line.split(",", 2)] for line in smi_csv.splitlines() if line.strip()]
    rows = [r + [""] * (3 - len(r)) for r in rows]
    if visible is None:
        return GpuInventory(tuple(r[0] for r in rows), tuple(r[2] for r in rows))
    ids: list[str] = []
    names: list[str] = []
    for token in (v.strip() for v in visible.split(",")):
        if not token or token == "-1":
            break  # CUDA stops at the first invalid entry
        for index, uuid, name in rows:
            if token == index or (token and uuid.startswith(token)):
                if index not in ids:
                    ids.append(index)
                    names.append(name)
                break
    return GpuInventory(tuple(ids), tuple(names))
