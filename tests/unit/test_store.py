"""Store: run ids a cluster accepts, records that come back intact, helpful lookups of missing runs."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from nbtrain.errors import EnvironmentProblem, RunNotFoundError
from nbtrain.spec import JobSpec
from nbtrain.store import RunRecord, Store, default_home, write_json_atomic

DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _record(run_id: str, *, created: float = 1000.0, **changes: object) -> RunRecord:
    spec = JobSpec(name="digits", nodes=2, procs_per_node=2, env={"SEED": "1"},
                   tolerations=({"key": "gpu", "operator": "Exists"},))
    return RunRecord(run_id=run_id, spec=spec, bundle_digest="ab" * 32, backend="local",
                     created=created, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["digits", "My Digits Run!", "___", "é" * 5, "x" * 200, "UPPER-case_99"])
def test_new_run_id_is_a_dns_label_and_reserved(tmp_path: Path, name: str) -> None:
    store = Store(tmp_path)
    run_id = store.new_run_id(name)
    assert DNS_1123_LABEL.match(run_id), run_id
    assert len(run_id) <= 63
    assert store.run_dir(run_id).is_dir()


def test_new_run_id_starts_with_the_slug_of_the_name(tmp_path: Path) -> None:
    run_id = Store(tmp_path).new_run_id("My Digits Run!")
    assert re.fullmatch(r"my-digits-run-[0-9a-f]{6}", run_id)


def test_new_run_ids_are_unique(tmp_path: Path) -> None:
    store = Store(tmp_path)
    ids = [store.new_run_id("digits") for _ in range(200)]
    assert len(set(ids)) == len(ids)


def test_record_round_trip_keeps_the_spec(tmp_path: Path) -> None:
    store = Store(tmp_path)
    record = _record("digits-3fa9c2", handle={"attempt": 0, "supervisor_pid": 123},
                     notebook={"path": "train.ipynb", "cell_id": "c1"}, tracking_run_id="mlf-1",
                     attempts=[{"attempt": 0, "state": "failed"}], state="failed",
                     failure={"reason": "boom", "rank": 3}, ended=1005.5)
    store.save(record)
    loaded = store.load("digits-3fa9c2")
    assert loaded == record
    assert loaded.spec.world_size == 4
    assert loaded.spec.env == {"SEED": "1"}


def test_saving_again_replaces_the_record(tmp_path: Path) -> None:
    store = Store(tmp_path)
    record = _record("digits-3fa9c2")
    store.save(record)
    record.state = "succeeded"
    store.save(record)
    assert store.load("digits-3fa9c2").state == "succeeded"
    leftovers = [p.name for p in store.run_dir("digits-3fa9c2").iterdir()]
    assert leftovers == ["record.json"]  # no temp files left behind


def test_record_from_a_newer_version_still_loads(tmp_path: Path) -> None:
    store = Store(tmp_path)
    data = _record("digits-3fa9c2").to_dict()
    data["field_from_the_future"] = {"x": 1}
    data["spec"]["spec_field_from_the_future"] = 2
    write_json_atomic(store.run_dir("digits-3fa9c2") / "record.json", data)
    assert store.load("digits-3fa9c2").spec.nodes == 2


def test_load_of_an_unknown_id_suggests_close_ids(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.save(_record("digits-3fa9c2"))
    store.save(_record("mnist-000001"))
    with pytest.raises(RunNotFoundError) as info:
        store.load("digits")
    message = str(info.value)
    assert "'digits'" in message
    assert "Did you mean: digits-3fa9c2?" in message
    assert "mnist" not in message
    assert isinstance(info.value, LookupError)


def test_load_with_nothing_close_says_how_to_list_runs(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.save(_record("digits-3fa9c2"))
    with pytest.raises(RunNotFoundError, match=r"nbtrain\.runs\(\)"):
        store.load("cifar-ffffff")


def test_resolve_expands_a_unique_prefix(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.save(_record("digits-3fa9c2"))
    store.save(_record("digits-77aa01"))
    assert store.resolve("digits-3f") == "digits-3fa9c2"
    assert store.resolve("digits-77aa01") == "digits-77aa01"


def test_resolve_of_an_ambiguous_prefix_lists_the_candidates(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.save(_record("digits-3fa9c2"))
    store.save(_record("digits-77aa01"))
    with pytest.raises(RunNotFoundError) as info:
        store.resolve("digits-")
    assert "digits-3fa9c2" in str(info.value)
    assert "digits-77aa01" in str(info.value)


def test_resolve_of_an_unknown_id_raises(tmp_path: Path) -> None:
    with pytest.raises(RunNotFoundError):
        Store(tmp_path).resolve("nothing")


def test_records_are_newest_first_and_unreadable_ones_skipped(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.save(_record("b-000002", created=2000.0))
    store.save(_record("c-000003", created=3000.0))
    store.save(_record("a-000001", created=1000.0))
    broken = store.run_dir("z-broken") / "record.json"
    broken.parent.mkdir(parents=True)
    broken.write_text("{ not json")
    assert [r.run_id for r in store.records()] == ["c-000003", "b-000002", "a-000001"]


def test_ids_are_newest_first_by_last_save(tmp_path: Path) -> None:
    store = Store(tmp_path)
    for index, run_id in enumerate(["old-000001", "new-000002", "mid-000003"]):
        store.save(_record(run_id))
        mtime = {0: 100, 1: 300, 2: 200}[index]
        os.utime(store.run_dir(run_id) / "record.json", (mtime, mtime))
    assert store.ids() == ["new-000002", "mid-000003", "old-000001"]


def test_an_empty_store_has_no_runs(tmp_path: Path) -> None:
    store = Store(tmp_path / "never-created")
    assert store.ids() == []
    assert store.records() == []
    assert not (tmp_path / "never-created").exists()


def test_store_under_a_file_is_reported_as_not_writable(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    store = Store(blocker / "store")
    with pytest.raises(EnvironmentProblem) as info:
        store.ensure_writable()
    message = str(info.value)
    assert str(blocker / "store") in message
    assert "NBTRAIN_HOME" in message
    with pytest.raises(EnvironmentProblem):
        store.new_run_id("digits")


def test_default_home_follows_nbtrain_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBTRAIN_HOME", str(tmp_path / "home"))
    assert default_home() == tmp_path / "home"
    assert Store().root == tmp_path / "home"
    monkeypatch.delenv("NBTRAIN_HOME")
    assert default_home() == Path.home() / ".nbtrain"


def test_write_json_atomic_creates_parents_and_leaves_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "status.json"
    write_json_atomic(path, {"state": "running", "path": tmp_path})
    write_json_atomic(path, {"state": "succeeded"})
    assert json.loads(path.read_text()) == {"state": "succeeded"}
    assert [p.name for p in path.parent.iterdir()] == ["status.json"]
