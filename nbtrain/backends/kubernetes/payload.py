"""The bundle and the worker runtime as ConfigMaps mounted into every pod (pure).

ConfigMap keys cannot contain ``/``, so each file gets a flat key and the volume's ``items`` put it back
at its path: ``bundle/<file>`` (the bundle directory) and ``runtime/nbtrain/...`` (on ``PYTHONPATH``,
so the image needs no nbtrain). Text files go to ``data``, others (``objects.pkl``) to ``binaryData``.

The API server refuses ConfigMaps over 1 MiB. A bundle that does not fit in one next to the runtime travels as
*parts*: the bundle directory as one deterministic ``.tar.gz`` cut into pieces of at most :data:`PART_SIZE` bytes,
each in its own ConfigMap (``<configmap>-part-N``, owned by the workload like the first, so they go with it). One
projected volume lays them out as ``parts/NNN`` next to the runtime and ``parts.json`` (each part's sha256 and
ConfigMap, the archive's sha256). Before anything else runs, the pod's preflight (:mod:`.preflight`) checks every
part and the whole archive against those digests, refusing a part that does not match by its path and ConfigMap,
and unpacks the bundle into the pod's ``/tmp`` (:data:`UNPACKED_PATH`), from which the worker runs it (and verifies
it again, file by file, against its manifest). Why ConfigMaps and not a ``--volume``: they need no storage, work for
every flavor and namespace, and are garbage-collected with the run; the cost is one API object per
:data:`PART_SIZE`, hence the cap :data:`BUNDLE_CAP` (bigger data belongs on a volume or in the image, and is refused
with a SpecError naming the sizes and what to do instead).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import re
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbtrain.errors import SpecError

__all__ = ["BUNDLE_CAP", "CONFIGMAP_LIMIT", "MOUNT_PATH", "PART_SIZE", "Payload", "build_payload"]

CONFIGMAP_LIMIT = 1024 * 1024  # the API server's limit on a ConfigMap's data + binaryData
PART_SIZE = 900 * 1024  # bytes of the bundle archive per part ConfigMap (base64 in binaryData: ~1.2 MB on the wire)
BUNDLE_CAP = 32 * 1024 * 1024  # the biggest bundle archive sent as parts (37 part ConfigMaps at most)
MOUNT_PATH = "/opt/nbtrain"
BUNDLE_PATH = f"{MOUNT_PATH}/bundle"
RUNTIME_PATH = f"{MOUNT_PATH}/runtime"
PARTS_INDEX = f"{MOUNT_PATH}/parts.json"  # what the preflight checks the parts against
UNPACKED_PATH = "/tmp/nbtrain-bundle"  # where the preflight unpacks a bundle sent as parts (the pod's writable /tmp)
PART_KEY = "part"


@dataclass(frozen=True)
class Payload:
    """ConfigMap content plus the volume items that lay it out as files."""

    data: dict[str, str] = field(default_factory=dict)
    binary_data: dict[str, str] = field(default_factory=dict)  # base64
    items: tuple[dict[str, str], ...] = ()
    sizes: dict[str, int] = field(default_factory=dict)  # path -> bytes
    parts: tuple[bytes, ...] = ()  # the bundle archive in pieces, when it travels as parts (see the module docstring)
    archive_sha256: str = ""
    configmap: str = ""  # the first ConfigMap's name (the parts are named after it)

    @property
    def size(self) -> int:
        """Bytes the API server counts against the limit of the first ConfigMap (keys and decoded values)."""
        return sum(len(k) for k in [*self.data, *self.binary_data]) + sum(
            size for path, size in self.sizes.items() if not (self.parts and path.startswith("bundle/")))

    @property
    def bundle_path(self) -> str:
        """Where the pod finds the bundle directory."""
        return UNPACKED_PATH if self.parts else BUNDLE_PATH

    def part_name(self, index: int) -> str:
        """The ConfigMap of part ``index``."""
        return f"{self.configmap}-part-{index}"

    def volume(self, configmap: str | None = None) -> dict[str, Any]:
        """The pod volume that lays the payload out under :data:`MOUNT_PATH`: the ConfigMap, or a projected volume of
        it and every part."""
        items = [dict(i) for i in self.items]
        name = configmap or self.configmap
        if not self.parts:
            return {"configMap": {"name": name, "items": items, "defaultMode": 0o444}}
        sources: list[dict[str, Any]] = [{"configMap": {"name": name, "items": items}}]
        sources += [{"configMap": {"name": self.part_name(i), "items": [{"key": PART_KEY, "path": f"parts/{i:03d}"}]}}
                    for i in range(len(self.parts))]
        return {"projected": {"sources": sources, "defaultMode": 0o444}}

    def preflight_args(self) -> list[str]:
        """The preflight's arguments that make it check and unpack the parts (none without parts)."""
        return ["--parts", PARTS_INDEX, "--unpack", UNPACKED_PATH] if self.parts else []

    def part_configmaps(self, first: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The part ConfigMaps, with the metadata (labels, annotations, namespace) of the ``first`` ConfigMap."""
        out = []
        for index, part in enumerate(self.parts):
            meta = {**dict(first["metadata"]), "name": self.part_name(index)}
            out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "immutable": True,
                        "binaryData": {PART_KEY: base64.b64encode(part).decode("ascii")}})
        return out


def _key(prefix: str, index: int, rel: str) -> str:
    return f"{prefix}{index:03d}-{re.sub(r'[^-._a-zA-Z0-9]+', '_', rel)}"[:253]


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _archive(files: Mapping[str, bytes]) -> bytes:
    """``files`` as a deterministic .tar.gz (sorted, no times, no owners): the same bundle gives the same bytes."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, content in sorted(files.items()):
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(content), 0o444, 0
            tar.addfile(info, io.BytesIO(content))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as packed:
        packed.write(raw.getvalue())
    return out.getvalue()


def build_payload(bundle_dir: str | Path, runtime: Mapping[str, bytes], *, configmap: str = "nbtrain") -> Payload:
    """Lay out ``bundle_dir`` under ``bundle/`` and ``runtime`` under ``runtime/`` in ConfigMap ``configmap``, the
    bundle in part ConfigMaps when the one would pass the API's limit; SpecError when it passes :data:`BUNDLE_CAP`."""
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
    payload = Payload(data, binary, tuple(items), sizes, configmap=configmap)
    if payload.size <= CONFIGMAP_LIMIT:
        return payload
    bundle = groups[0][2]
    archive = _archive(bundle)
    if len(archive) > BUNDLE_CAP:
        biggest = sorted(((p, n) for p, n in sizes.items() if p.startswith("bundle/")), key=lambda kv: -kv[1])[:3]
        listing = ", ".join(f"{path} {size / 1024:.0f} KiB" for path, size in biggest)
        raise SpecError(
            f"the bundle is too big for the Kubernetes backend: {len(archive) / 2**20:.1f} MiB compressed ({listing}) "
            f"but the ConfigMaps that carry it to the pods hold at most {BUNDLE_CAP // 2**20} MiB. Capture less: "
            "load data inside the cell (from a --volume, a URL or the image) instead of using a notebook "
            "object, or lower --max-capture-mb to find what is big; large files belong in the image or a volume."
        )
    parts = tuple(archive[i:i + PART_SIZE] for i in range(0, len(archive), PART_SIZE))
    listing_of_parts = {"sha256": hashlib.sha256(archive).hexdigest(), "size": len(archive),
             "parts": [{"path": f"parts/{i:03d}", "configmap": f"{configmap}-part-{i}",
                        "sha256": hashlib.sha256(part).hexdigest(), "size": len(part)} for i, part in enumerate(parts)]}
    data = {k: v for k, v in data.items() if not k.startswith("b")}
    binary = {k: v for k, v in binary.items() if not k.startswith("b")}
    items = [i for i in items if not i["path"].startswith("bundle/")]
    data["parts.json"] = json.dumps(listing_of_parts, indent=1, sort_keys=True)
    items.append({"key": "parts.json", "path": "parts.json"})
    return Payload(data, binary, tuple(items), sizes, parts, str(listing_of_parts["sha256"]), configmap)
