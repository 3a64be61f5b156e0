"""``nbtrain stats --prometheus``: the figures in the Prometheus text exposition format (version 0.0.4; pure).

Every family has its ``# HELP`` and ``# TYPE`` lines; label values are escaped (backslash, double quote, newline).
The figures describe a window of runs, not counts since a process started, so families are gauges (and
summaries for the duration distributions), never counters. A ratio with nothing to divide is left out rather
than sent as NaN. Written for a node exporter's textfile collector or a push gateway.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from nbtrain.stats.model import Stats, Summary

__all__ = ["CONTENT_TYPE", "escape_label", "to_prometheus"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Sample = tuple[str, dict[str, str], float]


def escape_label(value: str) -> str:
    """A label value as the exposition format writes it inside double quotes."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    return repr(float(value))


def _family(name: str, kind: str, help_text: str, samples: Iterable[Sample]) -> list[str]:
    lines = [f"# HELP {name} {_escape_help(help_text)}", f"# TYPE {name} {kind}"]
    for sample, labels, value in samples:
        text = ",".join(f'{key}="{escape_label(val)}"' for key, val in labels.items())
        lines.append(f"{sample}{{{text}}} {_number(value)}" if text else f"{sample} {_number(value)}")
    return lines


def _summary(name: str, s: Summary) -> list[Sample]:
    out: list[Sample] = []
    if s.p50 is not None and s.p90 is not None:
        out += [(name, {"quantile": "0.5"}, s.p50), (name, {"quantile": "0.9"}, s.p90)]
    return [*out, (f"{name}_sum", {}, s.total), (f"{name}_count", {}, float(s.count))]


def _maybe(name: str, value: float | None) -> list[Sample]:
    return [] if value is None else [(name, {}, value)]


def to_prometheus(stats: Stats, sources: Sequence[tuple[str, str]] = ()) -> str:
    """The exposition text of ``stats`` (ends with a newline). ``sources`` only add an info gauge per store."""
    families: list[list[str]] = []

    def add(name: str, kind: str, help_text: str, samples: Iterable[Sample]) -> None:
        families.append(_family(name, kind, help_text, samples))

    if stats.window_start is not None:
        add("nbtrain_stats_window_seconds", "gauge", "Length of the window of runs (created in the last N seconds).",
            [("nbtrain_stats_window_seconds", {}, stats.now - stats.window_start)])
    add("nbtrain_stats_source_info", "gauge", "A run store the figures were read from, and its user.",
        [("nbtrain_stats_source_info", {"store": store, "user": user}, 1.0) for store, user in sources])
    add("nbtrain_user_runs", "gauge", "Runs of each user in the store (every run, not only the window).",
        [("nbtrain_user_runs", {"user": u.user}, float(u.runs)) for u in stats.users])
    add("nbtrain_time_to_first_distributed_run_seconds", "gauge",
        "Per user: first run submitted to the end of the first successful run of 2 or more ranks.",
        [("nbtrain_time_to_first_distributed_run_seconds", {"user": u.user}, u.time_to_first_distributed_s)
         for u in stats.users if u.time_to_first_distributed_s is not None])
    add("nbtrain_runs", "gauge", "Runs created in the window, by final or current state.",
        [("nbtrain_runs", {"state": state}, float(count)) for state, count in
         (("succeeded", stats.succeeded), ("failed", stats.failed), ("cancelled", stats.cancelled),
          ("live", stats.live))])
    add("nbtrain_run_success_ratio", "gauge", "Succeeded runs / (succeeded + failed runs) in the window.",
        _maybe("nbtrain_run_success_ratio", stats.success_rate))
    add("nbtrain_time_to_recover_seconds", "summary",
        "From the first failure of a streak of one job to its next success (recovered streaks only).",
        _summary("nbtrain_time_to_recover_seconds", stats.time_to_recover))
    add("nbtrain_unrecovered_failures", "gauge", "Failure streaks not (yet) followed by a success of the same job.",
        [("nbtrain_unrecovered_failures", {}, float(stats.unrecovered))])
    add("nbtrain_queue_wait_seconds", "summary", "Attempts: submitted to every rank started.",
        _summary("nbtrain_queue_wait_seconds", stats.queue_wait))
    add("nbtrain_templates_recorded", "gauge", "1 when the run records keep the profile/template used, else 0.",
        [("nbtrain_templates_recorded", {}, 1.0 if stats.templates_recorded else 0.0)])
    add("nbtrain_template_runs_ratio", "gauge", "Share of the window's runs that used a profile/template.",
        _maybe("nbtrain_template_runs_ratio", stats.template_share))
    add("nbtrain_resumed_attempts", "gauge", "Resumed attempts (user resumes and automatic restarts) in the window.",
        [("nbtrain_resumed_attempts", {"from_checkpoint": "true"}, float(stats.resumed_from_checkpoint)),
         ("nbtrain_resumed_attempts", {"from_checkpoint": "false"},
          float(stats.resumed_attempts - stats.resumed_from_checkpoint))])
    add("nbtrain_checkpoint_recovery_ratio", "gauge",
        "Resumed attempts with an earlier checkpoint that succeeded / such attempts.",
        _maybe("nbtrain_checkpoint_recovery_ratio", stats.checkpoint_recovery_rate))
    add("nbtrain_gang_process_hours", "gauge", "Per backend: nodes x processes per node x running hours.",
        [("nbtrain_gang_process_hours", {"backend": b.backend}, b.process_hours) for b in stats.backends])
    add("nbtrain_gang_gpu_hours", "gauge", "Per backend: process-hours of runs that asked for GPUs (--device gpu).",
        [("nbtrain_gang_gpu_hours", {"backend": b.backend}, b.gpu_hours) for b in stats.backends])
    return "\n".join(line for family in families for line in family) + "\n"
