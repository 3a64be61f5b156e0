"""compute_stats (pure): each figure on small hand-made runs, and the edge cases (no runs, only failures,
a failure never recovered, several users merged); the Prometheus text parses with prometheus_client."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nbtrain.stats import AttemptFacts, AttemptKind, RunFacts, compute_stats, parse_since
from nbtrain.stats.prometheus import escape_label, to_prometheus
from nbtrain.stats.render import to_json, to_text

NOW = 1_800_000_000.0
DAY = 86400.0


def _run(run_id: str, *attempts: AttemptFacts, user: str = "ada", job: str = "train", created: float = NOW - DAY,
         nodes: int = 1, procs: int = 2, backend: str = "local", gpu: bool = False, profile: str | None = None,
         profile_recorded: bool = False) -> RunFacts:
    return RunFacts(run_id=run_id, user=user, job=job, backend=backend, created=created, nodes=nodes, procs=procs,
                    gpu=gpu, state=attempts[-1].state if attempts else "pending", attempts=attempts,
                    profile=profile, profile_recorded=profile_recorded)


def _attempt(number: int, state: str, started: float, ended: float | None, *, kind: AttemptKind = AttemptKind.SUBMIT,
             submitted: float | None = None, all_started: float | None = None, checkpoint: bool = False
             ) -> AttemptFacts:
    return AttemptFacts(number=number, kind=kind, state=state, submitted=submitted, all_ranks_started=all_started,
                        started=started, ended=ended, checkpoint_before=checkpoint)


def test_no_runs_gives_zero_counts_and_no_ratios() -> None:
    stats = compute_stats([], NOW, 30 * DAY)
    assert (stats.runs, stats.succeeded, stats.failed, stats.users, stats.backends) == (0, 0, 0, (), ())
    assert stats.success_rate is None and stats.checkpoint_recovery_rate is None and stats.template_share is None
    assert stats.queue_wait.count == 0 and stats.queue_wait.mean is None and stats.time_to_recover.mean is None
    assert stats.window_start == NOW - 30 * DAY
    text = to_text(stats)
    assert "success rate: - " in text and "templates: not recorded" in text
    families = {f.name: f for f in text_string_to_metric_families(to_prometheus(stats))}
    assert "nbtrain_run_success_ratio" not in {s.name for f in families.values() for s in f.samples}
    assert families["nbtrain_queue_wait_seconds"].type == "summary"


def test_only_failures_give_a_zero_success_rate_and_unrecovered_streaks() -> None:
    base = NOW - 3600
    runs = [_run("a-1", _attempt(0, "failed", base, base + 10)),
            _run("b-1", _attempt(0, "failed", base + 100, base + 130), job="other")]
    stats = compute_stats(runs, NOW, None)
    assert (stats.failed, stats.success_rate, stats.unrecovered) == (2, 0.0, 2)
    assert [r.recovered_s for r in stats.recoveries] == [None, None]
    assert stats.time_to_recover.count == 0
    assert stats.users[0].time_to_first_distributed_s is None
    assert "no successful distributed run yet" in to_text(stats)


def test_a_failure_streak_ends_at_the_next_success_of_the_same_job_only() -> None:
    base = NOW - 3600
    runs = [
        _run("t-1", _attempt(0, "failed", base, base + 10)),
        _run("t-2", _attempt(0, "failed", base + 20, base + 30)),  # same streak: it started at base + 10
        _run("u-1", _attempt(0, "succeeded", base + 40, base + 50), job="unrelated"),  # another job: no recovery
        _run("t-3", _attempt(0, "cancelled", base + 60, base + 70)),  # cancelled: neither ends nor starts a streak
        _run("t-4", _attempt(0, "succeeded", base + 80, base + 110)),
        _run("t-5", _attempt(0, "failed", base + 200, base + 210)),  # never recovered
    ]
    stats = compute_stats(runs, NOW, None)
    assert [(r.job, r.failed_at - base, r.recovered_s) for r in stats.recoveries] == [
        ("train", 10.0, 100.0), ("train", 210.0, None)]
    assert (stats.time_to_recover.count, stats.time_to_recover.mean, stats.unrecovered) == (1, 100.0, 1)
    assert (stats.succeeded, stats.failed, stats.cancelled) == (2, 3, 1)
    assert stats.success_rate == pytest.approx(2 / 5)


def test_an_automatic_restart_that_succeeds_recovers_its_run_and_counts_as_a_checkpoint_recovery() -> None:
    base = NOW - 3600
    run = _run("r-1", _attempt(0, "failed", base, base + 60, submitted=base - 5, all_started=base + 2),
               _attempt(1, "succeeded", base + 61, base + 161, kind=AttemptKind.RESTART, checkpoint=True))
    stats = compute_stats([run], NOW, None)
    assert [r.recovered_s for r in stats.recoveries] == [101.0]
    assert (stats.resumed_attempts, stats.resumed_from_checkpoint, stats.checkpoint_recovery_rate) == (1, 1, 1.0)
    assert stats.queue_wait.count == 1 and stats.queue_wait.mean == 7.0  # the restart has no submit time
    (usage,) = stats.backends
    assert usage.process_hours == pytest.approx(2 * 160 / 3600) and usage.gpu_hours == 0.0


def test_since_keeps_runs_created_in_the_window_but_first_distributed_run_is_lifetime() -> None:
    old, recent = NOW - 40 * DAY, NOW - DAY
    runs = [_run("old-1", _attempt(0, "succeeded", old, old + 100), procs=1, created=old),
            _run("new-1", _attempt(0, "succeeded", recent, recent + 100), procs=2, created=recent)]
    stats = compute_stats(runs, NOW, 30 * DAY)
    assert stats.runs == 1 and stats.succeeded == 1
    (user,) = stats.users
    assert user.runs == 2 and user.first_run == old
    assert user.time_to_first_distributed_s == (recent + 100) - old  # the 1-rank run does not count as distributed
    assert compute_stats(runs, NOW, None).runs == 2
    with pytest.raises(ValueError, match="since=-1"):
        compute_stats(runs, NOW, -1)


def test_users_of_merged_stores_are_kept_apart() -> None:
    base = NOW - 3600
    runs = [_run("a-1", _attempt(0, "failed", base, base + 10), user="ada"),
            _run("a-2", _attempt(0, "succeeded", base + 20, base + 50), user="ada", created=NOW - 2000),
            _run("b-1", _attempt(0, "succeeded", base + 30, base + 40), user="bob", created=NOW - 1000),
            _run("b-2", _attempt(0, "failed", base + 5, base + 15), user="bob")]  # bob's job "train" is not ada's
    stats = compute_stats(runs, NOW, None)
    assert [(u.user, u.runs, u.time_to_first_distributed_s) for u in stats.users] == [
        ("ada", 2, (base + 50) - (NOW - DAY)), ("bob", 2, (base + 40) - (NOW - DAY))]
    assert [(r.user, r.recovered_s) for r in stats.recoveries] == [("ada", 40.0), ("bob", 25.0)]


def test_queue_wait_summary_and_gang_hours_per_backend() -> None:
    base = NOW - 3600
    runs = [_run(f"q-{i}", _attempt(0, "succeeded", base, base + 3600, submitted=base, all_started=base + wait),
                 nodes=2, procs=4, backend="slurm" if i % 2 else "local", gpu=bool(i % 2))
            for i, wait in enumerate([1.0, 2.0, 3.0, 4.0, 100.0])]
    runs.append(_run("live-1", _attempt(0, "running", NOW - 1800, None)))  # a live attempt counts to now
    stats = compute_stats(runs, NOW, None)
    assert (stats.queue_wait.count, stats.queue_wait.mean, stats.queue_wait.p50, stats.queue_wait.p90,
            stats.queue_wait.max) == (5, 22.0, 3.0, 100.0, 100.0)
    assert [(b.backend, b.runs, b.process_hours, b.gpu_hours) for b in stats.backends] == [
        ("local", 4, 3 * 8.0 + 2 * 0.5, 0.0), ("slurm", 2, 16.0, 16.0)]
    assert stats.live == 1


def test_template_share_when_records_keep_profiles() -> None:
    base = NOW - 3600
    runs = [_run("p-1", _attempt(0, "succeeded", base, base + 1), profile="multinode-ddp", profile_recorded=True),
            _run("p-2", _attempt(0, "succeeded", base, base + 1), profile_recorded=True)]
    stats = compute_stats(runs, NOW, None)
    assert (stats.templates_recorded, stats.template_runs, stats.template_share) == (True, 1, 0.5)
    assert "templates: 1 of 2 runs (50.0%)" in to_text(stats)


def test_prometheus_text_parses_with_escaped_labels_and_matches_the_json() -> None:
    base = NOW - 3600
    user = 'we"ird\\user\nname'
    runs = [_run("x-1", _attempt(0, "failed", base, base + 10), user=user, backend='k"8s'),
            _run("x-2", _attempt(0, "succeeded", base + 20, base + 50, submitted=base + 15, all_started=base + 19),
                 user=user, backend='k"8s')]
    stats = compute_stats(runs, NOW, 7 * DAY)
    text = to_prometheus(stats, [("/home/x/.nbtrain", user)])
    assert text.endswith("\n")
    assert 'user="we\\"ird\\\\user\\nname"' in text and escape_label('a"b') == 'a\\"b'
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("nbtrain_time_to_first_distributed_run_seconds", (("user", user),))] == 50.0 + (base - (NOW - DAY))
    assert samples[("nbtrain_run_success_ratio", ())] == 0.5
    assert samples[("nbtrain_time_to_recover_seconds_count", ())] == 1.0
    assert samples[("nbtrain_time_to_recover_seconds_sum", ())] == 40.0
    assert samples[("nbtrain_queue_wait_seconds", (("quantile", "0.5"),))] == 4.0
    assert samples[("nbtrain_gang_process_hours", (("backend", 'k"8s'),))] == pytest.approx(2 * 40 / 3600)
    assert samples[("nbtrain_stats_window_seconds", ())] == 7 * DAY
    document = to_json(stats)
    assert document["runs"]["success_rate"] == 0.5 and document["window"]["seconds"] == 7 * DAY
    help_lines = [line for line in text.splitlines() if line.startswith("# HELP ")]
    type_lines = [line for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(help_lines) == len(type_lines) == len({line.split()[2] for line in type_lines})


@pytest.mark.parametrize(("text", "seconds"), [("30d", 30 * DAY), ("12h", 43200.0), ("90m", 5400.0), ("45s", 45.0),
                                               ("2w", 14 * DAY), ("600", 600.0), ("all", None), ("", None)])
def test_parse_since(text: str, seconds: float | None) -> None:
    assert parse_since(text) == seconds


@pytest.mark.parametrize("text", ["-3d", "soon", "nand", "infd"])
def test_parse_since_refuses_what_is_not_a_duration(text: str) -> None:
    with pytest.raises(ValueError, match="expected a duration such as 30d"):
        parse_since(text)


#: The JSON document the panel's TypeScript test reads (labextension/test/plugin-stats.test.ts): regenerate with
#: ``python -c "from tests.unit.stats.test_compute import write_fixture; write_fixture()"`` when the keys change
#: on purpose, and update the TypeScript parser with it.
FIXTURE = Path(__file__).resolve().parents[2] / "data" / "stats-document.json"


def _fixture_document() -> dict[str, object]:
    base = NOW - 10 * DAY
    runs = [
        _run("first-1", _attempt(0, "succeeded", NOW - 40 * DAY, NOW - 40 * DAY + 60), procs=1,
             created=NOW - 40 * DAY),
        _run("train-1", _attempt(0, "failed", base + 1, base + 100, submitted=base, all_started=base + 4),
             _attempt(1, "succeeded", base + 201, base + 500, kind=AttemptKind.RESUME, submitted=base + 200,
                      all_started=base + 210, checkpoint=True), created=base),
        _run("eval-1", _attempt(0, "failed", base + 1001, base + 1061), job="eval", nodes=2, created=base + 1000),
        _run("big-1", _attempt(0, "succeeded", base + 3010, base + 6610, submitted=base + 3000,
                               all_started=base + 3030), nodes=2, procs=4, backend="slurm", gpu=True,
             created=base + 3000),
    ]
    return to_json(compute_stats(runs, NOW, 30 * DAY), [("/home/ada/.nbtrain", "ada")])


def write_fixture() -> None:
    FIXTURE.write_text(json.dumps(_fixture_document(), indent=2, sort_keys=True) + "\n", encoding="utf-8")


def test_the_document_is_the_one_the_panel_is_tested_on() -> None:
    assert json.loads(FIXTURE.read_text(encoding="utf-8")) == _fixture_document(), (
        f"{FIXTURE} differs from what nbtrain/stats/render.py writes now; if the change is meant, regenerate it "
        "(see FIXTURE) and update labextension/src/plugin/stats.ts and its test.")
