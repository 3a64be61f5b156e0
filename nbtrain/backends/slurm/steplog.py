"""What ``srun`` says about the tasks of a step (pure): which task ended first, and how.

With one task per node (``--ntasks-per-node=1``), task K is node K of the allocation. ``srun`` reports each task
that ends badly as ``srun: error: NODE: task K: Killed`` or ``...: Exited with exit code N``, in the order it
learns of them; once one has failed it terminates the step (``--kill-on-bad-exit``), so every task it reports
after ``_step_signal``/``forcing job termination`` is collateral. When a node dies, its task is the first one
reported, while the ranks on the surviving nodes only see their processes vanish: this is how the Slurm
supervisor names the node that failed rather than a victim.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from nbtrain.model import Failure

__all__ = ["TaskEnd", "blame_node", "first_task_failure", "node_failure", "parse_task_ends", "unreachable_node"]

_TASK = re.compile(r"^srun: error: (?P<node>\S+): tasks? (?P<task>\d+)(?:-\d+)?: "
                   r"(?:(?P<killed>Killed)|Exited with exit code (?P<code>\d+)|(?P<other>.+))$")
_TERMINATING = re.compile(r"_step_signal: Terminating|forcing job termination|Job step aborted")
_NODE_FAILURE = re.compile(r"^srun: error: Node failure on (?P<node>\S+)")
_LAUNCH_FAILED = re.compile(r"failed on node (?P<node>[^\s:]+)")


@dataclass(frozen=True)
class TaskEnd:
    """One task of the step that ended badly, as ``srun`` reported it."""

    node_name: str
    task: int
    exit_code: int | None  # -9 for "Killed" (the torchelastic convention), N for "Exited with exit code N"
    said: str  # srun's own words
    collateral: bool  # reported after srun began terminating the step


def parse_task_ends(text: str) -> list[TaskEnd]:
    """Every badly-ended task ``srun`` reported in ``text`` (its output), in its order."""
    ends: list[TaskEnd] = []
    terminating = False
    for raw in text.splitlines():
        line = raw.strip()
        node_failure = _NODE_FAILURE.match(line)
        if node_failure is not None:
            terminating = True
            continue
        match = _TASK.match(line)
        if match is not None:
            code = -9 if match.group("killed") else int(match.group("code")) if match.group("code") else None
            ends.append(TaskEnd(match.group("node"), int(match.group("task")), code, line.removeprefix("srun: error: "),
                                terminating))
            continue
        if _TERMINATING.search(line):
            terminating = True
    return ends


def first_task_failure(text: str) -> TaskEnd | None:
    """The task whose failure made ``srun`` end the step, or None when it reported none before terminating."""
    ends = [end for end in parse_task_ends(text) if not end.collateral]
    return ends[0] if ends else None


def node_failure(text: str) -> str | None:
    """The node ``srun`` says failed (``Node failure on NAME``), or None."""
    for raw in text.splitlines():
        match = _NODE_FAILURE.match(raw.strip())
        if match is not None:
            return match.group("node")
    return None


def unreachable_node(text: str) -> str | None:
    """The node ``srun`` could not reach or start a task on (``Task launch ... failed on node NAME:``, ``Node failure
    on NAME``, ``NAME: task K: ...``), or None. Lines may be joined by ``; `` (:func:`.cli.probe`'s answer)."""
    for raw in re.split(r"\n|; ", text):
        line = raw.strip()
        for pattern in (_LAUNCH_FAILED, _NODE_FAILURE, _TASK):
            match = pattern.search(line) if pattern is _LAUNCH_FAILED else pattern.match(line)
            if match is not None:
                return match.group("node")
    return None


def blame_node(chosen: Failure | None, srun_output: str, *, node_of: Mapping[int, int],
               last_lines: Mapping[int, list[str]]) -> Failure | None:
    """A Failure naming the node whose task ``srun`` saw fail first, when ``chosen`` only blames a victim.

    ``chosen`` is what the rank evidence says (None: nothing). A rank that reported an exception keeps the blame
    (its own words are better evidence); a rank that merely vanished, or was killed, on another node than the
    one srun names is taken as collateral of srun ending the step. A rank killed on the very node whose task
    srun reports ``Killed`` keeps the blame but gets srun's words, which name the node (a rank alone can only
    guess "killed from outside"). Returns None to keep ``chosen``.
    """
    first = first_task_failure(srun_output)
    failed_node = node_failure(srun_output)
    if first is None and failed_node is None:
        return None
    if chosen is not None and chosen.exc_type is not None:
        return None
    task = first.task if first is not None else None
    if chosen is not None and task is not None and chosen.node == task and (first is None or first.exit_code != -9):
        return None
    if task is None:
        return Failure(reason=f"Slurm node {failed_node} failed during the step (srun: Node failure on "
                              f"{failed_node}); resume the run from its last checkpoint, or exclude the node with "
                              f"--sbatch exclude={failed_node}", rank=None, node=None)
    assert first is not None
    ranks = sorted(rank for rank, node in node_of.items() if node == task)
    rank = chosen.rank if chosen is not None and chosen.node == task else ranks[0] if ranks else None
    if first.exit_code == -9:
        reason = (f"the processes of node {task} ({first.node_name}) were killed (srun: {first.said}): the node "
                  "failed, or its memory ran out; check the node with `scontrol show node "
                  f"{first.node_name}`, then resume the run")
        signal = "SIGKILL"
    else:
        reason = f"the task of node {task} ({first.node_name}) failed first (srun: {first.said})"
        signal = None
    return Failure(reason=reason, rank=rank, node=task, exit_code=first.exit_code, signal=signal,
                   last_lines=tuple(last_lines.get(rank, [])) if rank is not None else ())
