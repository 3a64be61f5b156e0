"""The bundle and the worker runtime as one ConfigMap mounted into every pod (pure).

ConfigMap keys cannot contain ``/``, so each file gets a flat key and the volume's ``items`` put it back
at its path: ``bundle/<file>`` (the bundle directory) and ``runtime/nbtrain/...`` (on ``PYTHONPATH``,
so the image needs no nbtrain). Text files go to ``data``, others (``objects.pkl``) to ``binaryData``.
The API server refuses ConfigMaps over 1 MiB; a bigger payload is a SpecError naming the sizes and
what to do instead.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from nbtrain.errors import SpecError

__all__ = ["CONFIGMAP_LIMIT", "MOUNT_PATH", "Payload", "build_payload"]

CONFIGMAP_LIMIT = 1024 * 1024  # the API server's limit on a ConfigMap's data + binaryData
MOUNT_PATH = "/opt/nbtrain"
BUNDLE_PATH = f"{MOUNT_PATH}/bundle"
RUNTIME_PATH = f"{MOUNT_PATH}/runtime"


@dataclass(frozen=True)
class Payload:
    """ConfigMap content plus the volume items that lay it out as files."""

    data: dict[str, str] = field(default_factory=dict)
    binary_data: dict[str, str] = field(default_factory=dict)  # base64
    items: tuple[dict[str, str], ...] = ()
    sizes: dict[str, int] = field(default_factory=dict)  # path -> bytes

    @property
    def size(self) -> int:
        """Bytes the API server counts against the limit (keys and decoded values)."""
        return sum(len(k) for k in [*self.data, *self.binary_data]) + sum(self.sizes.values())


def _key(prefix: str, index: int, rel: str) -> str:
    return f"{prefix}{index:03d}-{re.sub(r'[^-._a-zA-Z0-9]+', '_', rel)}"[:253]


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def build_payload(bundle_dir: str | Path, runtime: Mapping[str, bytes]) -> Payload:
    """Lay out ``bundle_dir`` under ``bundle/`` and ``runtime`` under ``runtime/``; SpecError when too big."""
    data: dict[str, str] = {}
    binary: dict[str, str] = {}
    items: list[dict[str, str]] = []
    sizes: dict[str, int] = {}
    groups = (("b", "bundle", _files(Path(bundle_dir))), ("r", "runtime", dict(runtime)))
    for prefix, folder, files in groups:
        for index, (rel, content) in enumerate(sorted(files.items())):
            key = _key(prefix, index, rel)
            path = f"{folder}/{rel}"
            try:
                data[key] = content.decode("utf-8")
            except UnicodeDecodeError:
                binary[key] = base64.b64encode(content).decode("ascii")
            items.append({"key": key, "path": path})
            sizes[path] = len(content)
    payload = Payload(data, binary, tuple(items), sizes)
    if payload.size > CONFIGMAP_LIMIT:
        biggest = sorted(sizes.items(), key=lambda kv: -kv[1])[:3]
        listing = ", ".join(f"{path} {size / 1024:.0f} KiB" for path, size in biggest)
        raise SpecError(
            f"the bundle is too big for the Kubernetes backend: {payload.size / 1024:.0f} KiB ({listing}) but the "
            f"ConfigMap that carries it to the pods holds at most {CONFIGMAP_LIMIT // 1024} KiB. Capture less: "
            "load data inside the cell (from shared storage, a URL or the image) instead of using a notebook "
            "object, or lower --max-capture-mb to find what is big; large files belong in the image or a volume."
        )
    return payload
