"""Which checkpoint ``latest`` names on object storage, and what a failed read of it means."""

from __future__ import annotations

from typing import Any

import fsspec
import pytest

from nbtrain.runtime.objstore import _latest_step


class _Unreachable:
    """A filesystem whose reads fail as s3fs's do when the store throttles, the network drops or access is denied."""

    def cat_file(self, path: str) -> Any:
        raise PermissionError(f"Access Denied: {path}")


def test_latest_names_the_committed_step_and_its_absence_means_none_yet() -> None:
    fs = fsspec.filesystem("memory")
    root = "/ckpt-latest-test"
    assert _latest_step(fs, root) is None  # nothing committed yet: start from scratch
    fs.pipe_file(f"{root}/latest", b"step-000000012\n")
    assert _latest_step(fs, root) == 12
    fs.pipe_file(f"{root}/latest", b"garbage")
    assert _latest_step(fs, root) is None
    fs.rm(root, recursive=True)


def test_a_marker_that_cannot_be_read_stops_rather_than_restarting_from_step_zero() -> None:
    with pytest.raises(RuntimeError, match=r"cannot read the checkpoint marker /bucket/run/latest .*Access Denied"):
        _latest_step(_Unreachable(), "/bucket/run")
