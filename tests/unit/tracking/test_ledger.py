"""The exactly-once bookkeeping: per-stream marks, their file, and MLflow-sized chunks (pure)."""

from __future__ import annotations

from pathlib import Path

from nbtrain.events import Event, EventKind
from nbtrain.spec import JobSpec
from nbtrain.store import RunRecord
from nbtrain.tracking.ledger import Entry, Ledger, Pending, Point, stream_key
from nbtrain.tracking.links import run_url, tracking_url


def _event(source: str, seq: int, attempt: int = 0) -> Event:
    return Event(EventKind.METRIC, source, seq, 0.0, attempt, 0, {"step": seq, "values": {"loss": 1.0}})


def _entry(stream: str, seq: int, points: int = 1, **extra: object) -> Entry:
    return Entry(stream, seq, [Point("loss", float(i), 0, seq) for i in range(points)], **extra)  # type: ignore[arg-type]


def test_marks_are_per_source_and_attempt() -> None:
    ledger = Ledger()
    ledger.commit([_entry("rank-0|0", 5), _entry("supervisor|0", 2)])
    assert ledger.seen(_event("rank-0", 5)) and ledger.seen(_event("rank-0", 1))
    assert not ledger.seen(_event("rank-0", 6))
    assert not ledger.seen(_event("rank-0", 1, attempt=1))  # a new attempt numbers from 1 again
    assert ledger.seen(_event("supervisor", 2)) and not ledger.seen(_event("rank-1", 1))
    ledger.commit([_entry("rank-0|0", 3)])  # never moves backwards
    assert ledger.hwm["rank-0|0"] == 5


def test_marked_attempts_follow_their_entries() -> None:
    ledger = Ledger()
    ledger.commit([_entry("rank-0|1", 1, marks=1)])
    assert ledger.marked == {1}


def test_ledger_round_trips_and_tolerates_a_missing_or_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "tracking.json"
    assert Ledger.load(path) == Ledger()
    ledger = Ledger(tracking_uri="sqlite:///x.db", experiment_id="3", mlflow_run_id="abc", marked={0, 1},
                    finalized={"attempt": 1, "state": "succeeded"})
    ledger.commit([_entry("rank-0|0", 7)])
    ledger.uploaded["logs"].append(0)
    ledger.save(path)
    assert Ledger.load(path) == ledger
    path.write_text("{not json")
    assert Ledger.load(path) == Ledger()
    path.write_text("[]")
    assert Ledger.load(path) == Ledger()


def test_stream_key() -> None:
    assert stream_key(_event("rank-0", 3, attempt=2)) == "rank-0|2"


def test_chunks_fit_mlflow_limits_and_keep_event_order() -> None:
    pending = Pending()
    for seq in range(1, 701):  # 700 events x 3 points = 2,100 points
        pending.add(_entry("rank-0|0", seq, points=3))
    assert pending.points == 2100 and pending.due(max_points=1000, max_age_s=60)
    chunks = list(pending.chunks())
    assert [len(points) for points, _, _ in chunks] == [999, 999, 102]  # whole events only
    assert [e.seq for _, _, entries in chunks for e in entries] == list(range(1, 701))
    assert len(pending) == 0 and pending.points == 0 and not pending.due(max_points=1, max_age_s=0)


def test_an_event_larger_than_a_batch_is_split_and_marked_with_its_last_slice() -> None:
    pending = Pending()
    pending.add(_entry("rank-0|0", 1, points=2500))
    pending.add(_entry("rank-0|0", 2, points=1))
    chunks = list(pending.chunks())
    assert [(len(p), [e.seq for e in es]) for p, _, es in chunks] == [(1000, []), (1000, []), (501, [1, 2])]


def test_entries_without_points_ride_along_and_do_not_make_a_flush_due() -> None:
    pending = Pending()
    pending.add(Entry("supervisor|0", 1))
    pending.add(Entry("rank-0|0", 1))
    assert not pending.due(max_points=1, max_age_s=0)
    pending.add(_entry("rank-0|0", 2, tags={"nbtrain.worker.torch": "2"}))
    assert pending.due(max_points=1000, max_age_s=0)
    ((points, tags, entries),) = list(pending.chunks())
    assert len(points) == 1 and tags == {"nbtrain.worker.torch": "2"} and len(entries) == 3


def test_tags_per_chunk_stay_within_100() -> None:
    pending = Pending()
    for seq in range(1, 4):
        pending.add(Entry("rank-0|0", seq, tags={f"t{seq}.{i}": "v" for i in range(60)}))
    assert [len(tags) for _, tags, _ in pending.chunks()] == [60, 60, 60]


def test_run_url_only_for_tracking_servers() -> None:
    assert run_url("http://127.0.0.1:5000/", "4", "abc") == "http://127.0.0.1:5000/#/experiments/4/runs/abc"
    assert run_url("https://mlflow.example.com", "1", "r") == "https://mlflow.example.com/#/experiments/1/runs/r"
    assert run_url("sqlite:////tmp/mlflow.db", "1", "r") is None
    assert run_url("http://x", None, "r") is None and run_url(None, "1", "r") is None


def test_tracking_url_reads_the_runs_ledger(home: Path) -> None:
    from nbtrain.store import Store

    store = Store()
    run_id = store.new_run_id("linked")
    record = RunRecord(run_id=run_id, spec=JobSpec(), bundle_digest="d", backend="local")
    assert tracking_url(record) is None  # not tracked yet
    Ledger(tracking_uri="http://mlflow:5000", experiment_id="7", mlflow_run_id="abc").save(
        store.run_dir(run_id) / "tracking.json")
    record.tracking_run_id = "abc"
    assert tracking_url(record) == "http://mlflow:5000/#/experiments/7/runs/abc"
    assert tracking_url(record, store=store) == "http://mlflow:5000/#/experiments/7/runs/abc"
