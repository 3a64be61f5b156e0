"""A bundle too big for one ConfigMap travels as parts (pure, no cluster): each part ConfigMap is valid and under the
API's limit, the pod mounts them in one projected volume, and the preflight checks every part's digest, names a part
that does not match, and unpacks exactly the bundle; above the cap the plan is refused."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from nbtrain.backends.kubernetes import KubeOptions, KubernetesBackend, preflight
from nbtrain.backends.kubernetes.payload import BUNDLE_CAP, CONFIGMAP_LIMIT, UNPACKED_PATH, build_payload
from nbtrain.bundle import capture_cell
from nbtrain.errors import SpecError
from nbtrain.spec import JobSpec
from nbtrain.store import Store


@pytest.fixture
def big_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Path]:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    bundle = capture_cell("len(blob)\n", {"__name__": "__main__", "blob": os.urandom(3_000_000)})
    directory = bundle.write(tmp_path / "bundles")
    backend = KubernetesBackend(Store(tmp_path / "home"), options=KubeOptions(image="ghcr.io/org/train:1"))
    return backend.plan(JobSpec(backend="kubernetes", nodes=2), str(directory), bundle.digest, "big-3fa9c2"), directory


def _lay_out(objects: list[dict[str, Any]], volume: dict[str, Any], root: Path) -> None:
    """What the kubelet does with the projected volume: every source's items as files under ``root``."""
    by_name = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
    for source in volume["projected"]["sources"]:
        configmap = by_name[source["configMap"]["name"]]
        data = {k: v.encode() for k, v in (configmap.get("data") or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (configmap.get("binaryData") or {}).items()})
        for item in source["configMap"]["items"]:
            (root / item["path"]).parent.mkdir(parents=True, exist_ok=True)
            (root / item["path"]).write_bytes(data[item["key"]])


def test_a_3mb_bundle_travels_as_valid_part_configmaps_in_one_projected_volume(big_plan: tuple[Any, Path]) -> None:
    plan, _ = big_plan
    objects = plan.request.objects
    job = objects[0]
    parts = [o for o in objects if o["kind"] == "ConfigMap" and "-part-" in o["metadata"]["name"]]
    assert len(parts) >= 3, [o["metadata"]["name"] for o in objects]
    for version in ("1.30.0", kubernetes_validate.latest_version() + ".0"):
        for obj in objects:
            if obj["kind"] != "Secret":
                kubernetes_validate.validate(obj, version, strict=True)
    first = next(o for o in objects if o["kind"] == "ConfigMap" and "-part-" not in o["metadata"]["name"])
    for configmap in [first, *parts]:
        size = sum(len(v) for v in (configmap.get("data") or {}).values()) + sum(
            len(base64.b64decode(v)) for v in (configmap.get("binaryData") or {}).values())
        assert size <= CONFIGMAP_LIMIT, (configmap["metadata"]["name"], size)
        assert configmap["immutable"] is True and configmap["metadata"]["labels"] == first["metadata"]["labels"]
    pod = job["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "nbtrain"]
    sources = [s["configMap"]["name"] for s in volume["projected"]["sources"]]
    assert sources == [first["metadata"]["name"], *(p["metadata"]["name"] for p in parts)]
    container = pod["containers"][0]
    command = container["command"]
    assert command[command.index("--parts") + 1] == "/opt/nbtrain/parts.json"
    assert command[command.index("--unpack") + 1] == UNPACKED_PATH and command[-1] == "--"
    assert UNPACKED_PATH in container["args"]  # the worker runs the unpacked bundle
    assert "part ConfigMaps" in plan.request.describe


def test_the_preflight_unpacks_exactly_the_bundle_and_names_a_part_that_does_not_match(big_plan: tuple[Any, Path],
                                                                                         tmp_path: Path) -> None:
    plan, directory = big_plan
    objects = plan.request.objects
    (volume,) = [v for v in objects[0]["spec"]["template"]["spec"]["volumes"] if v["name"] == "nbtrain"]
    mounted, unpacked = tmp_path / "mounted", tmp_path / "unpacked"
    _lay_out(objects, volume, mounted)
    assert preflight.unpack(str(mounted / "parts.json"), str(unpacked)) is None
    expected = {p.relative_to(directory).as_posix(): p.read_bytes() for p in directory.rglob("*") if p.is_file()}
    assert {p.relative_to(unpacked).as_posix(): p.read_bytes() for p in unpacked.rglob("*") if p.is_file()} == expected

    damaged = mounted / "parts" / "001"
    data = bytearray(damaged.read_bytes())
    data[100] ^= 0xFF
    damaged.write_bytes(bytes(data))
    said = preflight.unpack(str(mounted / "parts.json"), str(tmp_path / "again"))
    assert said is not None and said.startswith(preflight.MARKER)
    name = json.loads((mounted / "parts.json").read_text())["parts"][1]["configmap"]
    assert f"the bundle part {damaged} (ConfigMap {name}) does not match its digest" in said, said
    assert "nothing ran" in said and not (tmp_path / "again").exists()
    # through main(): the pod exits with its own code before exec'ing anything
    argv = ["--image", "img", "--need", "json", "--parts", str(mounted / "parts.json"), "--unpack",
            str(tmp_path / "again"), "--", "/bin/false-never-run"]
    assert preflight.main(argv) == preflight.EXIT_BUNDLE


def test_small_bundles_keep_the_one_configmap_and_bundles_over_the_cap_are_refused(tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.mkdir()
    (small / "main.py").write_text("print('hi')\n")
    payload = build_payload(small, {}, configmap="run-cm")
    assert not payload.parts and payload.preflight_args() == [] and "configMap" in payload.volume()
    huge = tmp_path / "huge"
    huge.mkdir()
    (huge / "objects.pkl").write_bytes(os.urandom(BUNDLE_CAP + 1024))  # incompressible
    with pytest.raises(SpecError, match=r"bundle/objects.pkl 32769 KiB.*hold at most 32 MiB.*--volume"):
        build_payload(huge, {})
