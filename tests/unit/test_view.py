"""RunView: the picture of a run the notebook shows, built from events that may arrive more than once."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

from nbtrain.events import Event, EventKind, EventWriter, read_events
from nbtrain.model import Failure, RunState
from nbtrain.view import MetricSeries, RunView, metric_history


class Source:
    """Numbers events like an EventWriter does, without a file."""

    def __init__(self, source: str, *, attempt: int = 0, rank: int | None = None) -> None:
        self.source, self.attempt, self.rank, self.seq = source, attempt, rank, 0

    def __call__(self, kind: EventKind, time: float = 0.0, **data: object) -> Event:
        self.seq += 1
        return Event(kind, self.source, self.seq, time, self.attempt, self.rank, dict(data))


def _metric(source: Source, step: int, time: float = 0.0, total: int | None = None, **values: float) -> Event:
    return source(EventKind.METRIC, time, step=step, values=values, total=total)


def test_a_fresh_view_is_pending_and_empty() -> None:
    view = RunView()
    assert view.state is RunState.PENDING
    assert view.last_metrics() == {}
    assert view.failure is None


def test_duplicates_are_ignored() -> None:
    view = RunView()
    event = _metric(Source("rank-0", rank=0), 1, loss=0.9)
    assert view.apply(event) is True
    assert view.apply(event) is False
    assert list(view.metrics[0]["loss"]) == [(0, 1, 0.9)]


def test_same_seq_from_another_source_or_attempt_is_not_a_duplicate() -> None:
    view = RunView()
    assert view.apply(_metric(Source("rank-0", rank=0), 1, loss=0.9))
    assert view.apply(_metric(Source("rank-1", rank=1), 1, loss=0.8))
    assert view.apply(_metric(Source("rank-0", attempt=1, rank=0), 1, loss=0.7))
    assert list(view.metrics[0]["loss"]) == [(0, 1, 0.9), (1, 1, 0.7)]
    assert list(view.metrics[1]["loss"]) == [(0, 1, 0.8)]


def test_rereading_the_files_after_attach_does_not_double_the_metrics(tmp_path: Path) -> None:
    path = tmp_path / "rank-0.jsonl"
    writer = EventWriter(path, "rank-0", rank=0)
    for step in range(1, 4):
        writer.emit(EventKind.METRIC, step=step, values={"loss": 1.0 / step}, total=3)
    writer.close()
    view = RunView()
    applied = [view.apply(e) for e in read_events(path)] + [view.apply(e) for e in read_events(path)]
    assert applied == [True] * 3 + [False] * 3
    assert [step for _, step, _ in view.metrics[0]["loss"]] == [1, 2, 3]
    assert view.total == 3


def test_metrics_accumulate_per_rank_and_last_metrics_reads_the_latest() -> None:
    view = RunView()
    rank0, rank1 = Source("rank-0", rank=0), Source("rank-1", rank=1)
    for event in [
        _metric(rank0, 1, total=10, loss=1.0, acc=0.1),
        _metric(rank1, 1, loss=1.1),
        _metric(rank0, 2, loss=0.5),
        _metric(rank1, 2, loss=0.6),
    ]:
        view.apply(event)
    assert list(view.metrics[0]["loss"]) == [(0, 1, 1.0), (0, 2, 0.5)]
    assert list(view.metrics[1]["loss"]) == [(0, 1, 1.1), (0, 2, 0.6)]
    assert view.last_metrics() == {"loss": 0.5, "acc": 0.1}
    assert view.last_metrics(1) == {"loss": 0.6}
    assert view.last_metrics(7) == {}
    assert view.total == 10
    assert view.ranks[0].last_step == 2


def test_rank_lifecycle_is_tracked() -> None:
    view = RunView()
    rank = Source("rank-3", rank=3)
    view.apply(rank(EventKind.RANK_START, 1.0, node=1, local_rank=1, pid=4242, host="trainer-1"))
    view.apply(rank(EventKind.ENV, 1.1, host="trainer-1", torch="2.4.0", device="cpu"))
    view.apply(rank(EventKind.HEARTBEAT, 2.0, step=17))
    info = view.ranks[3]
    assert (info.node, info.pid, info.host) == (1, 4242, "trainer-1")
    assert info.env["torch"] == "2.4.0"
    assert info.last_step == 17
    assert info.last_seen == 2.0
    view.apply(rank(EventKind.RANK_ERROR, 3.0, exc_type="ValueError", message="boom", traceback="..."))
    assert info.error == "ValueError: boom"
    view.apply(rank(EventKind.RANK_DONE, 4.0, ok=True, has_result=False))
    assert info.done


def test_lifecycle_states_and_times() -> None:
    view = RunView()
    sup = Source("supervisor")
    seen = []
    for time, state in [(10.0, "starting"), (11.0, "running"), (20.0, "succeeded")]:
        view.apply(sup(EventKind.STATE, time, state=state, reason=""))
        seen.append((view.state, view.started, view.ended))
    assert seen == [
        (RunState.STARTING, 10.0, None),
        (RunState.RUNNING, 10.0, None),
        (RunState.SUCCEEDED, 10.0, 20.0),
    ]
    assert view.state.terminal


def test_failure_and_notices() -> None:
    view = RunView()
    sup = Source("supervisor")
    failure = Failure(reason="the training code raised an exception", rank=3, node=1, exit_code=1,
                      exc_type="ValueError", message="boom", last_lines=("a", "b"), cell_line=4)
    view.apply(sup(EventKind.NOTICE, message="no GPU used: running on CPU"))
    view.apply(sup(EventKind.NOTICE, message="no GPU used: running on CPU"))  # same text, new seq
    view.apply(sup(EventKind.FAILURE, **failure.to_dict()))
    view.apply(sup(EventKind.STATE, 5.0, state="failed", reason="rank 3 failed"))
    assert view.notices == ["no GPU used: running on CPU"]
    assert view.failure == failure
    assert view.failure is not None
    assert view.failure.summary() == "rank 3 (node 1) failed: ValueError: boom (cell line 4)"
    assert view.state is RunState.FAILED


def test_a_higher_attempt_resets_ranks_and_failure_but_keeps_history() -> None:
    view = RunView()
    sup0, rank0 = Source("supervisor"), Source("rank-0", rank=0)
    view.apply(rank0(EventKind.RANK_START, node=0, local_rank=0, pid=1, host="h"))
    view.apply(_metric(rank0, 5, loss=0.3))
    view.apply(sup0(EventKind.FAILURE, reason="killed", rank=0, exit_code=-9, signal="SIGKILL"))
    view.apply(sup0(EventKind.STATE, 5.0, state="failed", reason=""))
    assert view.failure is not None

    sup1, rank1 = Source("supervisor", attempt=1), Source("rank-0", attempt=1, rank=0)
    view.apply(sup1(EventKind.STATE, 6.0, state="starting", reason="restart from checkpoint step 4"))
    assert view.attempt == 1
    assert view.failure is None
    assert view.ranks == {}
    assert view.state is RunState.STARTING  # a restart leaves the previous attempt's FAILED behind
    view.apply(_metric(rank1, 5, loss=0.25))
    assert list(view.metrics[0]["loss"]) == [(0, 5, 0.3), (1, 5, 0.25)]
    assert view.last_metrics() == {"loss": 0.25}
    assert view.ranks[0].last_step == 5


def test_an_older_attempt_does_not_reset_a_newer_one() -> None:
    view = RunView()
    view.apply(Source("rank-0", attempt=1, rank=0)(EventKind.RANK_START, node=0, local_rank=0, pid=2, host="h"))
    view.apply(Source("rank-0", attempt=0, rank=0)(EventKind.HEARTBEAT, step=3))
    assert view.attempt == 1
    assert view.ranks[0].pid == 2


def test_an_older_attempts_metrics_are_kept_but_do_not_move_the_current_ranks() -> None:
    view = RunView()
    view.apply(_metric(Source("rank-0", attempt=1, rank=0), 3, loss=0.5))
    view.apply(_metric(Source("rank-0", attempt=0, rank=0), 9, loss=0.9))  # read late (a slow mirror)
    assert view.ranks[0].last_step == 3
    assert list(view.metrics[0]["loss"]) == [(1, 3, 0.5), (0, 9, 0.9)]


def test_the_step_comes_from_metrics_heartbeats_and_the_end_of_a_rank() -> None:
    view = RunView()
    rank = Source("rank-1", rank=1)
    view.apply(rank(EventKind.RANK_START, node=0, local_rank=1, pid=7, host="h"))
    assert view.ranks[1].last_step is None
    view.apply(rank(EventKind.HEARTBEAT, step=None, idle_s=0.1))  # no step reported yet: still unknown
    assert view.ranks[1].last_step is None
    view.apply(_metric(rank, 20, loss=0.1))  # accelerator.log / nbtrain.log
    assert view.ranks[1].last_step == 20
    view.apply(rank(EventKind.HEARTBEAT, step=21, collectives=40))  # progress without a metric
    assert view.ranks[1].last_step == 21
    view.apply(rank(EventKind.RANK_DONE, ok=True, has_result=False, step=25))
    assert view.ranks[1].last_step == 25 and view.ranks[1].done


def test_a_million_points_stay_in_bounded_memory_evenly_spread_with_spikes_and_the_latest_exact() -> None:
    import sys

    series = MetricSeries(1024)
    for step in range(1_000_000):
        series.add(0, step, 1e6 if step == 500_000 else 1.0 / (step + 1))
    held = sum(sys.getsizeof(a) for a in (series._attempts, series._steps, series._values))
    assert held < 64_000, held  # a list of every point: ~130 MB per metric (issue 12)
    assert len(series) <= 1024 and series.added == 1_000_000
    steps = [step for _, step, _ in series]
    assert steps == sorted(steps) and steps[0] == 0 and steps[-1] == 999_999
    assert max(b - a for a, b in pairwise(steps)) <= 2 * series.width  # evenly spread over the steps
    assert (0, 500_000, 1e6) in list(series)  # min/max decimation keeps the spike
    assert series.last == (0, 999_999, 1.0 / 1_000_000)


def test_every_metric_of_every_rank_is_bounded_in_the_view() -> None:
    view = RunView(metric_points=64)
    rank0, rank1 = Source("rank-0", rank=0), Source("rank-1", rank=1)
    for step in range(5_000):
        view.apply(_metric(rank0, step, loss=1.0 / (step + 1), lr=1e-3, acc=step % 97 / 97, tokens=float(step)))
        view.apply(_metric(rank1, step, loss=2.0))
    assert all(len(series) <= 64 for per_rank in view.metrics.values() for series in per_rank.values())
    assert view.last_metrics() == {"loss": 1.0 / 5_000, "lr": 1e-3, "acc": 4_999 % 97 / 97, "tokens": 4_999.0}
    assert view.ranks[0].last_step == view.ranks[1].last_step == 4_999


def test_metric_history_folds_every_point_from_the_events_later_attempts_winning() -> None:
    first, second = Source("rank-0", rank=0), Source("rank-0", attempt=1, rank=0)
    events = [_metric(first, step, loss=float(step)) for step in range(10)]
    events += [_metric(second, step, loss=-float(step)) for step in range(8, 12)]
    events.append(_metric(Source("rank-1", rank=1), 0, loss=5.0))
    history = metric_history(events, 0)
    assert history == {"loss": [(s, float(s)) for s in range(8)] + [(s, -float(s)) for s in range(8, 12)]}
    assert metric_history(events, 1) == {"loss": [(0, 5.0)]} and metric_history(events, 2) == {}


def test_a_chart_series_restarts_like_the_chart_does() -> None:
    chart = MetricSeries(16, restarts=True)
    for step in range(10):
        chart.add(0, step, float(step))
    chart.add(1, 6, -6.0)  # a restart from the checkpoint of step 5: steps 6.. are replaced
    chart.add(1, 6, -7.0)  # the same step again: replaced
    assert chart.points() == [(float(s), float(s)) for s in range(6)] + [(6.0, -7.0)]
    for step in range(7, 100):
        chart.add(1, step, 1.0)
    assert len(chart) <= 16 and chart.points()[-1] == (99.0, 1.0)


def test_a_stored_point_with_a_step_outside_int64_or_a_bad_value_is_skipped_not_fatal() -> None:
    """Issue 28: nbtrain.log refuses such steps, but an event file is data: the view, the metric history and the
    charts skip the bad point and keep every good one."""
    rank0 = Source("rank-0", rank=0)
    events = [_metric(rank0, 1, loss=0.9), rank0(EventKind.METRIC, step=2**63, values={"loss": 0.5}),
              rank0(EventKind.METRIC, step=-(2**63) - 1, values={"loss": 0.4}),
              rank0(EventKind.METRIC, step="7", values={"loss": 0.3}),
              rank0(EventKind.METRIC, step=3, values={"loss": "nan?", "acc": 0.5}), _metric(rank0, 4, loss=0.2)]
    view = RunView()
    for event in events:
        view.apply(event)
    assert list(view.metrics[0]["loss"]) == [(0, 1, 0.9), (0, 4, 0.2)]
    assert list(view.metrics[0]["acc"]) == [(0, 3, 0.5)]
    assert view.ranks[0].last_step == 4
    assert metric_history(events, 0) == {"loss": [(1, 0.9), (4, 0.2)], "acc": [(3, 0.5)]}
