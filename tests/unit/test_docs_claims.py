"""What the README and the env-diff report say agrees with the code they describe."""

from __future__ import annotations

import re
from pathlib import Path

from nbtrain.commands.envdiff import Difference
from nbtrain.registry import backend_names

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def test_the_opening_names_every_built_in_engine() -> None:
    opening = README.split("\n## ", 1)[0]
    assert "processes on this machine (the embedded default" in opening  # local: the default, no flag
    for name in set(backend_names(builtin=True)) - {"local"}:
        assert f"(`--backend {name}`)" in opening, name


def test_the_limits_give_the_bundle_size_kubernetes_takes() -> None:
    from nbtrain.backends.kubernetes.payload import BUNDLE_CAP, PART_SIZE

    limits = README.split("## Limits", 1)[1].split("\n## ", 1)[0]
    said = re.search(r"A bundle travels to the pods in ConfigMaps: up to (\d+) MiB \(a `\.tar\.gz`\s+in (\d+) KiB",
                     limits)
    assert said is not None, "the Limits section no longer says how big a bundle may be"
    assert (int(said[1]), int(said[2])) == (BUNDLE_CAP // 2**20, PART_SIZE // 1024)


def test_env_diff_names_the_driver_field_as_the_cuda_driver_api_version() -> None:
    line = Difference("driver", "12040", {0: "12020", 1: None}).line("at submit")
    assert line == "CUDA driver API: 12.4 at submit; 12.2 on rank 0; absent on rank 1"
