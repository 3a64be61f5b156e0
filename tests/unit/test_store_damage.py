"""A damaged run file breaks one run, not the list (issue 28): ``nbtrain runs`` lists the other runs and names each
left-out run and its file; ``nbtrain status`` of the damaged run fails with that message, not a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbtrain.cli import main
from nbtrain.errors import StoreFileError
from nbtrain.spec import JobSpec
from nbtrain.store import RunRecord, Store


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Store, dict[str, str]]:
    """Four finished local runs; three of them then damaged, each in its own way."""
    monkeypatch.setenv("NBTRAIN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NBTRAIN_TRACKING", "0")
    store = Store()
    ids = {}
    for name in ("good", "badstate", "listrec", "trunc"):
        ids[name] = store.new_run_id(name)
        store.save(RunRecord(run_id=ids[name], spec=JobSpec(name=name), bundle_digest="0" * 64, backend="local",
                             state="succeeded"))
    attempt = store.attempt_dir(ids["badstate"], 0)
    attempt.mkdir(parents=True)
    (attempt / "status.json").write_text('{"state": 5, "attempt": 0}')
    (store.run_dir(ids["listrec"]) / "record.json").write_text("[1, 2]")
    record = store.run_dir(ids["trunc"]) / "record.json"
    record.write_text(record.read_text()[:50])
    return store, ids


def test_runs_lists_the_others_and_names_each_damaged_run_and_file(
        store: tuple[Store, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    st, ids = store
    assert main(["runs"]) == 0
    out, err = capsys.readouterr()
    assert ids["good"] in out and "Traceback" not in err
    for name in ("badstate", "listrec", "trunc"):
        assert ids[name] not in out
    assert f"run {ids['listrec']}: {st.run_dir(ids['listrec']) / 'record.json'} is not a run record" in err
    assert "(a JSON list, not an object)" in err
    assert f"{st.run_dir(ids['trunc']) / 'record.json'}: not valid JSON" in err
    assert f"{st.attempt_dir(ids['badstate'], 0) / 'status.json'}: state 5 is not a run state nbtrain writes" in err
    records, problems = st.scan()
    assert {r.run_id for r in records} == {ids["badstate"], ids["good"]}
    assert len(problems) == 2


@pytest.mark.parametrize(("name", "words"), [
    ("badstate", "status.json: state 5 is not a run state nbtrain writes"),
    ("listrec", "record.json is not a run record nbtrain can read (a JSON list, not an object)"),
    ("trunc", "record.json: not valid JSON"),
])
def test_status_of_a_damaged_run_names_the_file(store: tuple[Store, dict[str, str]], name: str, words: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    st, ids = store
    assert main(["status", ids[name]]) != 0
    err = capsys.readouterr().err
    assert words in err and str(st.run_dir(ids[name])) in err and "Traceback" not in err
    if name != "badstate":
        with pytest.raises(StoreFileError):
            st.load(ids[name])
