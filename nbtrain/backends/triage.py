"""Find the FIRST failing rank of a gang from what each rank and launcher left behind (pure; every backend).

Each node's launcher reports its own "root cause", and when one rank dies the others fail soon after
with collective errors ("Connection closed by peer"). The real first failure is chosen across nodes:
real errors before collateral ones, then the earliest time.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable
from dataclasses import dataclass

from nbtrain.model import Failure

__all__ = ["Candidate", "choose_first_failure", "is_collateral", "parse_elastic_failures", "signal_name"]

_COLLATERAL = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|ProcessGroupGloo|"
    r"NCCL communicator was aborted|DistBackendError|DistNetworkError|recvBytes|"
    r"Socket Timeout|failed to recv|Connection refused|TCPStore",
    re.IGNORECASE,
)
_RANK_LINE = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)", re.MULTILINE)
_EXIT_LINE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)\s*\(pid:\s*(\d+)\)", re.MULTILINE)


@dataclass(frozen=True)
class Candidate:
    """One observed rank failure. ``time`` is when it happened (or was first observed)."""

    rank: int | None
    time: float
    exc_type: str | None = None
    message: str | None = None
    traceback: str | None = None
    exit_code: int | None = None
    cell_line: int | None = None
    reason: str = ""


def signal_name(exit_code: int | None) -> str | None:
    """'SIGKILL' for -9 (torchelastic's convention) or 137/128+n (shell convention); else None."""
    if exit_code is None:
        return None
    number = -exit_code if exit_code < 0 else (exit_code - 128 if 128 < exit_code < 160 else 0)
    if number <= 0:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def is_collateral(candidate: Candidate) -> bool:
    """True when the failure looks like a consequence of another rank dying.

    Either an error about a peer or the store going away ("Connection closed by peer"), or a rank
    ended by SIGTERM without an exception: torchelastic terminates the healthy ranks of a node with
    SIGTERM when one of them fails, so those are the victims, not the cause.
    """
    text = " ".join(filter(None, [candidate.exc_type, candidate.message]))
    if text and _COLLATERAL.search(text):
        return True
    return candidate.exc_type is None and signal_name(candidate.exit_code) == "SIGTERM"


def parse_elastic_failures(text: str) -> dict[int, int]:
    """Map global rank -> exit code from torchelastic's "Root Cause"/"Failures" blocks in a launcher log."""
    found: dict[int, int] = {}
    ranks = list(_RANK_LINE.finditer(text))
    for match in ranks:
        following = _EXIT_LINE.search(text, match.end())
        if following is not None:
            found.setdefault(int(match.group(1)), int(following.group(1)))
    return found


def choose_first_failure(
    candidates: Iterable[Candidate],
    *,
    node_of: dict[int, int],
    last_lines: dict[int, list[str]],
    exit_codes: dict[int, int],
) -> Failure | None:
    """The Failure to report: real errors before collateral ones, then earliest; None if no candidate."""
    ordered = sorted(candidates, key=lambda c: (is_collateral(c), c.time))
    if not ordered:
        return None
    first = ordered[0]
    code = first.exit_code if first.exit_code is not None else exit_codes.get(first.rank) if first.rank is not None else None
    sig = signal_name(code)
    reason = first.reason
    if sig == "SIGKILL" and not reason:
        reason = "killed from outside (often the kernel's OOM killer: check memory per rank)"
    elif sig and not reason:
        reason = f"terminated by {sig}"
    elif first.exc_type and not reason:
        reason = "the training code raised an exception"
    return Failure(
        reason=reason,
        rank=first.rank,
        node=node_of.get(first.rank) if first.rank is not None else None,
        exit_code=code if code is not None else (1 if first.exc_type else None),
        signal=sig,
        exc_type=first.exc_type,
        message=first.message,
        traceback=first.traceback,
        last_lines=tuple(last_lines.get(first.rank, []) if first.rank is not None else []),
        cell_line=first.cell_line,
        time=first.time,
    )


def stack_dump(lines: list[str], *, max_lines: int = 120) -> str | None:
    """The last all-threads stack dump a stalled rank wrote into its log (``nbtrain.runtime.progress``), or None."""
    from nbtrain.runtime.progress import STACKS_HEADER

    starts = [i for i, line in enumerate(lines) if STACKS_HEADER in line]
    if not starts:
        return None
    return "\n".join(lines[starts[-1]:starts[-1] + max_lines])
