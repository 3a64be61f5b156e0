"""The monitor's pure view-model: events and lines in, widget state and bounded messages out."""

from __future__ import annotations

import json

import pytest

from nbtrain.backends.storecursor import LogLines
from nbtrain.events import Event, EventKind, LineBlock
from nbtrain.model import Batch, Failure, LogLine, RunSnapshot, RunState
from nbtrain.view import RunView
from nbtrain.widgets.decimate import decimate
from nbtrain.widgets.viewmodel import MonitorLimits, MonitorModel

KERNEL = {"python": "3.11.7", "torch": "2.13.0", "accelerate": "1.15.0"}


class Feed:
    """Builds events the way workers and the supervisor write them."""

    def __init__(self) -> None:
        self.seq: dict[str, int] = {}
        self.t = 1000.0

    def event(self, kind: EventKind, rank: int | None = None, **data: object) -> Event:
        source = "supervisor" if rank is None else f"rank-{rank}"
        self.seq[source] = self.seq.get(source, 0) + 1
        self.t += 0.01
        return Event(kind, source, self.seq[source], self.t, 0, rank, dict(data))


def _model(nodes: int = 2, procs: int = 2, **limits: object) -> MonitorModel:
    return MonitorModel("r-1", "r", "local", nodes, procs, dict(KERNEL), MonitorLimits(**limits))  # type: ignore[arg-type]


def _snapshot(view: RunView, state: RunState, **extra: object) -> RunSnapshot:
    """What ``Run.snapshot`` gives for ``view`` when the backend says ``state``."""
    steps = [i.last_step for i in view.ranks.values() if i.last_step is not None]
    fields: dict[str, object] = dict(
        run_id="r-1", name="r", backend="local", state=state, attempt=view.attempt, nodes=2, procs=2, world_size=4,
        created=900.0, started=view.started, ended=view.ended, step=max(steps) if steps else None, total=view.total,
        notices=tuple(view.notices), failure=view.failure if state is RunState.FAILED else None)
    return RunSnapshot(**{**fields, **extra})  # type: ignore[arg-type]


def _apply(view: RunView, model: MonitorModel, events: list[Event], lines: list[LogLine] = ()) -> None:  # type: ignore[assignment]
    for e in events:
        view.apply(e)
    model.ingest(Batch(tuple(events), tuple(lines)))


def test_header_progress_and_device() -> None:
    feed, view, model = Feed(), RunView(), _model()
    events = [feed.event(EventKind.STATE, state="starting")]
    for rank in range(4):
        events.append(feed.event(EventKind.RANK_START, rank, node=rank // 2, pid=100 + rank))
        events.append(feed.event(EventKind.ENV, rank, python="3.11.7", torch="2.13.0+cpu", accelerate="1.15.0",
                                 device="cpu", host="h"))
        events.append(feed.event(EventKind.METRIC, rank, step=7, values={"loss": 0.5}, total=100))
    events.append(feed.event(EventKind.STATE, state="running"))
    _apply(view, model, events)
    header = model.header(_snapshot(view, RunState.RUNNING), view.ranks, now=2000.0, tracking_url="http://mlflow/x")
    assert header["state"] == "running" and header["step"] == 7 and header["total"] == 100
    assert header["world_size"] == 4 and header["device"] == "cpu" and header["now"] == 2000.0
    assert header["tracking_url"] == "http://mlflow/x" and header["can_resume"] is False
    assert header["started"] == view.started and header["attempt"] == 0 and not header["stopping"]
    stopped = model.header(_snapshot(view, RunState.CANCELLED, can_resume=True, notices=("resume me",)), view.ranks,
                           stopping=True)
    assert stopped["can_resume"] is True and stopped["notices"] == ["resume me"]
    assert stopped["stopping"] is False  # a run that already ended is not "stopping"
    env = model.env(view.ranks)
    assert env["mismatches"] == 0  # '+cpu' local tags are not a mismatch


def test_stragglers_and_stalled_ranks_stand_out() -> None:
    feed, view, model = Feed(), RunView(), _model(nodes=2, procs=4)
    events = []
    steps = [100, 100, 101, 99, 100, 60, 100, 100]
    for rank, step in enumerate(steps):
        events.append(feed.event(EventKind.RANK_START, rank, node=rank // 4, pid=rank + 1))
        events.append(feed.event(EventKind.METRIC, rank, step=step, values={"loss": 1.0}))
    _apply(view, model, events)
    view.ranks[3].last_seen = feed.t - 60  # silent for a minute (not even a heartbeat)
    grid = model.ranks(view.ranks, RunState.RUNNING, now=feed.t + 1)
    assert grid["median_step"] == 100
    cells = {c[0]: c for node in grid["nodes"] for c in node["ranks"]}
    assert cells[5][4] == 1 and cells[5][1] == "running"  # 40 steps behind: straggler
    assert cells[3][1] == "stalled"
    assert sum(c[4] for c in cells.values()) == 1
    assert [n["node"] for n in grid["nodes"]] == [0, 1] and len(grid["nodes"][1]["ranks"]) == 4
    assert grid["counts"]["stalled"] == 1 and grid["counts"]["straggler"] == 1
    # once the run is over nobody is "stalled" or "running": ranks that did not finish were stopped
    over = model.ranks(view.ranks, RunState.CANCELLED, now=feed.t + 1)["counts"]
    assert over["stalled"] == 0 and over["running"] == 0 and over["stopped"] == 8


def test_a_rank_that_keeps_beating_without_progress_is_stalled_and_the_supervisors_stall_marks_its_ranks() -> None:
    feed, view, model = Feed(), RunView(), _model(nodes=1, procs=3, progress_stall_s=30)
    events = [feed.event(EventKind.RANK_START, r, node=0, pid=r + 1) for r in range(3)]
    events += [feed.event(EventKind.METRIC, r, step=5, values={"loss": 1.0}) for r in range(3)]
    _apply(view, model, events)

    def grid() -> dict[int, str]:
        cells = model.ranks(view.ranks, RunState.RUNNING, now=feed.t + 0.1)["nodes"][0]["ranks"]
        return {c[0]: c[1] for c in cells}

    # rank 1's heartbeats keep coming (its heartbeat thread is alive) but report 40 s without progress
    feed.t += 40
    beats = [feed.event(EventKind.HEARTBEAT, r, step=5, collectives=3, idle_s=0.5 if r != 1 else 40.0)
             for r in range(3)]
    _apply(view, model, beats)
    assert grid() == {0: "running", 1: "stalled", 2: "running"}
    # the supervisor's stall notice names rank 2 as well (it judges with the run's --stall-after): marked too
    _apply(view, model, [feed.event(EventKind.NOTICE, message="stalled: ranks 1, 2 made no progress ...",
                                    stalled=[1, 2])])
    assert grid() == {0: "running", 1: "stalled", 2: "stalled"}
    # progress resumed: the notice clears the mark, the beats say rank 1 moves again
    _apply(view, model, [feed.event(EventKind.NOTICE, message="progress resumed", stalled=[]),
                         feed.event(EventKind.HEARTBEAT, 1, step=6, idle_s=0.1)])
    assert grid() == {0: "running", 1: "running", 2: "running"}


def test_rank_grid_scales_to_512_ranks() -> None:
    feed, view, model = Feed(), RunView(), _model(nodes=64, procs=8)
    _apply(view, model, [feed.event(EventKind.METRIC, r, step=5, values={"x": 1}) for r in range(512)])
    grid = model.ranks(view.ranks, RunState.RUNNING, now=feed.t)
    assert len(grid["nodes"]) == 64 and sum(len(n["ranks"]) for n in grid["nodes"]) == 512
    assert len(json.dumps(grid)) < 20_000  # stays small enough to sync once a second


def test_failure_is_pinned_only_when_failed() -> None:
    feed, view, model = Feed(), RunView(), _model()
    failure = Failure(reason="the training code raised", rank=3, node=1, exit_code=1, exc_type="ValueError",
                      message="boom", traceback="Traceback ...\nValueError: boom", last_lines=("a", "b"))
    _apply(view, model, [feed.event(EventKind.RANK_ERROR, 3, exc_type="ValueError", message="boom"),
                         Event(EventKind.FAILURE, "supervisor", 90, feed.t, 0, None, failure.to_dict()),
                         feed.event(EventKind.STATE, state="failed")])
    assert model.failure(_snapshot(view, RunState.RUNNING)) == {}
    pinned = model.failure(_snapshot(view, RunState.FAILED))
    assert pinned["rank"] == 3 and pinned["summary"].startswith("rank 3 (node 1) failed: ValueError: boom")
    assert pinned["traceback"].endswith("ValueError: boom") and pinned["last_lines"] == ["a", "b"]
    grid = model.ranks(view.ranks, RunState.FAILED, now=feed.t)
    assert {c[0]: c[1] for n in grid["nodes"] for c in n["ranks"]}[3] == "failed"


def test_batches_are_bounded_and_count_dropped_lines() -> None:
    view, model = RunView(), _model(batch_lines=100)
    lines = [LogLine(r, f"line {i}") for i in range(1000) for r in (0, 1)]
    _apply(view, model, [], lines)
    message = model.take_batch()
    assert message is not None and message["type"] == "batch" and message["seq"] == 1
    assert len(message["lines"]) == 100
    assert message["lines"][-1] == [1, 999, "line 999"]  # the newest, with its index in the rank's log
    assert int(message["dropped"]["0"]) + int(message["dropped"]["1"]) == 2000 - 100
    assert len(json.dumps(message)) < 500_000
    assert model.take_batch() is None  # nothing new: no message
    assert model.line_counts == {0: 1000, 1: 1000}


def test_points_are_sent_once_and_snapshot_is_decimated() -> None:
    feed, view, model = Feed(), RunView(), _model(chart_points=2000)
    _apply(view, model, [feed.event(EventKind.METRIC, 0, step=s, values={"loss": 1 / (s + 1)}) for s in range(10_000)]
           + [feed.event(EventKind.METRIC, 1, step=0, values={"loss": 9.0})])
    first = model.take_batch()
    assert first is not None and len(first["points"]["loss"]) <= 2000
    assert first["points"]["loss"][0] == [0.0, 1.0] and first["points"]["loss"][-1][0] == 9999.0
    _apply(view, model, [feed.event(EventKind.METRIC, 0, step=10_000, values={"loss": 0.0})])
    second = model.take_batch()
    assert second is not None and second["points"] == {"loss": [[10000.0, 0.0]]}
    snap = model.snapshot()
    assert snap["type"] == "snapshot" and len(snap["points"]["loss"]) <= 2000
    assert snap["points"]["loss"][-1] == [10000.0, 0.0]


def test_snapshot_keeps_recent_lines_per_rank_and_merged() -> None:
    view, model = RunView(), _model(snapshot_lines=50, merged_lines=80)
    _apply(view, model, [], [LogLine(r, f"r{r} {i}") for i in range(100) for r in (0, 1)])
    snap = model.snapshot()
    assert [i for i, _ in snap["lines"]["0"]] == list(range(50, 100))
    assert len(snap["merged"]) == 80 and snap["merged"][-1] == [1, 99, "r1 99"]


def test_env_mismatch_is_flagged() -> None:
    feed, view, model = Feed(), RunView(), _model()
    _apply(view, model, [feed.event(EventKind.ENV, 0, python="3.11.7", torch="2.12.0", accelerate="1.15.0",
                                    device="cuda:0", host="node-a", gpu_name="H100")])
    env = model.env(view.ranks)
    assert env["mismatches"] == 1 and env["ranks"][0]["mismatch"] == ["torch"]
    assert model.header(_snapshot(view, RunState.RUNNING), view.ranks)["device"] == "gpu"


@pytest.mark.parametrize("count", [0, 3, 10, 5000])
def test_decimate_bounds_and_keeps_ends_and_spikes(count: int) -> None:
    points = [(float(i), float(i % 7)) for i in range(count)]
    if count > 100:
        points[2500] = (2500.0, 1e6)
    out = decimate(points, 200)
    assert len(out) <= max(200, count if count <= 200 else 0) or count <= 200
    assert len(out) <= 200 or count <= 200
    if count:
        assert out[0] == points[0] and out[-1] == points[-1]
        assert [p[0] for p in out] == sorted(p[0] for p in out)
    if count > 100:
        assert (2500.0, 1e6) in out


def _blocks(rank: int, first: int, count: int, attempt: int = 0) -> LineBlock:
    data = "".join(f"rank {rank} line {i}\n" for i in range(first, first + count)).encode()
    return LineBlock(rank, attempt, first, count, data)


def test_lines_read_in_bulk_are_kept_as_bytes_and_decoded_only_when_sent() -> None:
    model = _model(batch_lines=10, snapshot_lines=5, merged_lines=4)
    model.ingest(Batch(lines=LogLines([_blocks(0, 0, 1000), _blocks(1, 0, 3)])))  # type: ignore[arg-type]
    assert model.line_counts == {0: 1000, 1: 3}
    message = model.take_batch()
    assert message is not None
    assert message["lines"][:7] == [[0, i, f"rank 0 line {i}"] for i in range(993, 1000)]
    assert message["lines"][7:] == [[1, i, f"rank 1 line {i}"] for i in range(3)]
    assert message["dropped"] == {"0": 993}
    model.ingest(Batch(lines=LogLines([_blocks(0, 1000, 2)])))  # type: ignore[arg-type]
    assert model.take_batch()["lines"] == [[0, 1000, "rank 0 line 1000"], [0, 1001, "rank 0 line 1001"]]  # type: ignore[index]
    snap = model.snapshot()
    assert snap["lines"]["0"] == [[i, f"rank 0 line {i}"] for i in range(997, 1002)]
    assert snap["merged"] == [[1, 1, "rank 1 line 1"], [1, 2, "rank 1 line 2"], [0, 1000, "rank 0 line 1000"],
                              [0, 1001, "rank 0 line 1001"]]  # the newest 4, in the order they arrived
    # a new attempt starts new logs: numbering starts again, the old attempt's lines are gone
    model.ingest(Batch(lines=LogLines([_blocks(0, 0, 2, attempt=1)])))  # type: ignore[arg-type]
    assert model.line_attempt == 1 and model.line_counts == {0: 2}
    model.ingest(Batch(lines=LogLines([_blocks(1, 3, 5, attempt=0)])))  # type: ignore[arg-type]
    assert model.line_counts == {0: 2}  # a late line of the old attempt is not shown


def test_memory_for_lines_is_bounded_per_rank_at_512_ranks() -> None:
    model = _model(nodes=64, procs=8)
    for poll in range(30):
        model.ingest(Batch(lines=LogLines([_blocks(r, poll * 200, 200) for r in range(512)])))  # type: ignore[arg-type]
        model.take_batch()
    held = sum(len(b.data) for ring in model.logs.rings.values() for b in ring.blocks)
    assert held < 512 * 5 * 97 * 30  # < 5 x 97 lines (50,000 / 512) of ~25 bytes per rank
    assert model.line_counts == dict.fromkeys(range(512), 6000)


def test_the_grid_shows_each_ranks_step_from_metrics_and_progress() -> None:
    feed, view, model = Feed(), RunView(), _model(nodes=1, procs=2)
    _apply(view, model, [feed.event(EventKind.RANK_START, 0, node=0, pid=1), feed.event(EventKind.RANK_START, 1, node=0, pid=2),
                         feed.event(EventKind.METRIC, 0, step=20, values={"loss": 0.1}),  # accelerator.log
                         feed.event(EventKind.HEARTBEAT, 1, step=19, idle_s=0.2)])  # progress, no metric on rank 1
    cells = {c[0]: c for node in model.ranks(view.ranks, RunState.RUNNING, now=feed.t)["nodes"] for c in node["ranks"]}
    assert cells[0][2] == 20 and cells[1][2] == 19
    assert model.take_batch()["points"] == {"loss": [[20.0, 0.1]]}  # type: ignore[index]  # the chart, same step


def test_a_large_gang_keeps_fewer_lines_per_rank_and_its_snapshot_stays_small() -> None:
    model = _model(nodes=64, procs=8)
    model.ingest(Batch(lines=LogLines([_blocks(r, 0, 1000) for r in range(512)])))  # type: ignore[arg-type]
    assert all(ring.held <= 97 for ring in model.logs.rings.values())  # 50,000 lines across 512 ranks
    snap = model.snapshot()
    assert {len(lines) for lines in snap["lines"].values()} == {39}  # 20,000 across 512 ranks
    assert snap["lines"]["511"][-1] == [999, "rank 511 line 999"]
    assert len(json.dumps(snap)) < 1_500_000
    small = _model()
    small.ingest(Batch(lines=LogLines([_blocks(r, 0, 1000) for r in range(4)])))  # type: ignore[arg-type]
    assert {len(lines) for lines in small.snapshot()["lines"].values()} == {500}
