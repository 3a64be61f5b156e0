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
            [smi, "--query-gpu=index,name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return GpuInventory()
    rows = [line.split(",", 1) for line in out.splitlines() if line.strip()]
    ids = [r[0].strip() for r in rows]
    names = [r[1].strip() if len(r) > 1 else "" for r in rows]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        wanted = [v.strip() for v in visible.split(",") if v.strip() and v.strip() != "-1"]
        keep = [i for i, gid in enumerate(ids) if gid in wanted]
        ids = [ids[i] for i in keep]
        names = [names[i] for i in keep]
    return GpuInventory(tuple(ids), tuple(names))
