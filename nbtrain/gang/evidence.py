"""The first failure of a gang, from what its ranks and launchers left (read at verdict time only).

:func:`first_failure` gathers the candidates (ranks that reported an error, ranks that vanished, exit codes the
launchers' torchelastic agents logged) and lets :func:`nbtrain.backends.triage.choose_first_failure` pick the
first real one across nodes; a rank that failed inside a collective the others never entered gets a desync
diagnosis (:func:`nbtrain.backends.hang.desync_at_failure`). With no rank evidence at all, the first launcher
that exited non-zero is named. A driver may refine the result with evidence of its own
(:meth:`nbtrain.gang.driver.GangDriver.evidence`: Slurm's srun saw a node die first).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from nbtrain.backends.hang import desync_at_failure
from nbtrain.gang.facts import LAST_LINES, RankFacts
from nbtrain.model import Failure

__all__ = ["first_failure"]


def first_failure(facts: RankFacts, *, world: int, node_of: dict[int, int], logs_dir: Path,
                  codes: list[int | None]) -> Failure:
    """The attempt's failure; ``codes`` are the nodes' launcher exit codes (None: still running)."""
    from nbtrain.backends import triage  # verdict-time only: not on the way to starting the launchers
    from nbtrain.backends.storecursor import tail_lines

    elastic: dict[int, int] = {}
    for i, _ in enumerate(codes):
        text = "\n".join(tail_lines(logs_dir / f"node-{i}.log", 400))
        elastic.update(triage.parse_elastic_failures(text))
    candidates = [
        triage.Candidate(
            rank=rank, time=e.time, exc_type=e.data.get("exc_type"), message=e.data.get("message"),
            traceback=e.data.get("traceback"), cell_line=e.data.get("cell_line"), exit_code=1,
        )
        for rank, e in facts.errors.items()
    ]
    candidates += [
        triage.Candidate(rank=rank, time=t, exit_code=code if code is not None else elastic.get(rank),
                         reason="" if (code or elastic.get(rank)) else "the process disappeared without reporting")
        for rank, (t, code) in facts.vanished.items()
    ]
    last = {r: tail_lines(logs_dir / f"rank-{r}.log", LAST_LINES) for r in range(world)}
    chosen = triage.choose_first_failure(candidates, node_of=node_of, last_lines=last, exit_codes=elastic)
    if chosen is not None:
        return _diagnosed(chosen, facts, world)
    if elastic:
        rank = min(elastic)
        return triage.choose_first_failure(
            [triage.Candidate(rank=rank, time=time.time(), exit_code=elastic[rank])],
            node_of=node_of, last_lines=last, exit_codes=elastic,
        ) or Failure(reason="unknown")
    for i, exit_code in enumerate(codes):
        if exit_code is not None and exit_code != 0:
            lines = tail_lines(logs_dir / f"node-{i}.log", LAST_LINES)
            return Failure(
                reason=f"the launcher of node {i} exited with code {exit_code} before any rank reported",
                node=i, exit_code=exit_code, signal=triage.signal_name(-exit_code if exit_code < 0 else exit_code),
                last_lines=tuple(lines),
            )
    return Failure(reason="the gang ended without a verdict from any rank")


def _diagnosed(failure: Failure, facts: RankFacts, world: int) -> Failure:
    """``failure`` with a desync diagnosis when its rank failed inside a collective the others never entered."""
    if failure.rank is None or failure.rank not in facts.errors:
        return failure
    issued: dict[int, int] = {}
    for rank in range(world):
        final = facts.errors.get(rank) or facts.final.get(rank)
        data = final.data if final is not None else (facts.beats.get(rank, (0.0, {}))[1])
        if "collectives" in data:
            issued[rank] = int(data["collectives"])
    diagnosis = desync_at_failure(failure.rank, facts.errors[failure.rank].data.get("failed_in"), issued,
                                  set(facts.done))
    return replace(failure, diagnosis=diagnosis) if diagnosis else failure
