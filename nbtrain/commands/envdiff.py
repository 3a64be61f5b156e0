"""``nbtrain env-diff RUN`` / ``%nbtrain env-diff RUN``: how the ranks' environments differ from this process's.

Each rank reports its environment when it starts (an ``env`` event: python, torch, accelerate, CUDA runtime, NCCL,
the CUDA driver API version (``driver``: what the installed NVIDIA driver supports, not the driver's own version),
device; the installed packages once per node, from local rank 0). This command compares them with the submitting
process's, recorded at submit (:mod:`nbtrain.envreport`), or — for a run submitted before that was recorded — with
the process running it (the kernel for ``%nbtrain env-diff``, the ``nbtrain`` interpreter in a terminal), and with
each other, and prints one line per difference. Exit code 0 either way; a run whose ranks never reported (they did
not start) is an error naming the run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FIELDS", "LABELS", "MAGIC_USAGE", "Difference", "env_diff", "environment_here", "register", "register_magic",
           "render"]

#: The version fields compared (package versions are compared separately).
FIELDS = ("python", "torch", "accelerate", "cuda", "nccl", "driver", "device")
#: How a line names a field, where its key says too little (``driver`` is cudaDriverGetVersion's number, e.g. 12040:
#: the CUDA version the NVIDIA driver supports, shown as 12.4; the driver's own release is not reported).
LABELS = {"cuda": "CUDA runtime", "nccl": "NCCL", "driver": "CUDA driver API"}
#: Fields that legitimately differ between ranks and the kernel or between ranks (the kernel runs no GPU rank).
_PER_RANK = ("device",)

MAGIC_USAGE = """  env-diff RUN              how the ranks' environments (versions, CUDA, NCCL, packages) differ from the kernel's
"""


@dataclass(frozen=True)
class Difference:
    """One field (``what``: a FIELDS name or ``package NAME``) whose value differs: here and per rank (None: absent)."""

    what: str
    here: str | None
    ranks: Mapping[int, str | None] = field(default_factory=dict)

    def line(self, where: str = "here") -> str:
        """``torch: 2.5.1 here; 2.4.0 on ranks 0, 1`` (``where``: what the first value is, e.g. "at submit")."""
        groups: dict[str | None, list[int]] = {}
        for rank, value in sorted(self.ranks.items()):
            groups.setdefault(value, []).append(rank)
        there = "; ".join(f"{_show(self.what, value)} on {_ranks(ranks)}" for value, ranks in groups.items())
        return f"{LABELS.get(self.what, self.what)}: {_show(self.what, self.here)} {where}; {there}"


def _show(what: str, value: str | None) -> str:
    if value is None:
        return "absent"
    if what == "driver" and value.isdigit():  # cudaDriverGetVersion: 1000 * major + 10 * minor
        return f"{int(value) // 1000}.{int(value) % 1000 // 10}"
    return value


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def env_diff(here: Mapping[str, Any], ranks: Mapping[int, Mapping[str, Any]]) -> list[Difference]:
    """Differences between ``here`` (this process's report) and each rank's report (pure).

    A version field differs when any rank's value differs from here or from another rank's (``device``, and a field
    ``here`` leaves out, e.g. CUDA where torch was not imported, are compared between ranks only). Packages are compared on the ranks that reported
    them (one per node): a package missing, extra or at another version on any of them is one difference.
    """
    differences = []
    for name in FIELDS:
        values = {rank: _text(env.get(name)) for rank, env in ranks.items()}
        ranks_only = name in _PER_RANK or name not in here
        mine = None if ranks_only else _text(here.get(name))
        distinct = set(values.values())
        if len(distinct) > 1 or (not ranks_only and distinct and distinct != {mine}):
            differences.append(Difference(name, mine, values))
    nodes = {rank: env["packages"] for rank, env in ranks.items() if isinstance(env.get("packages"), Mapping)}
    theirs = here.get("packages")
    mine_packages: Mapping[str, Any] = theirs if isinstance(theirs, Mapping) else {}
    if nodes:
        names = sorted(set(mine_packages).union(*[set(p) for p in nodes.values()]))
        for package in names:
            values = {rank: _text(packages.get(package)) for rank, packages in nodes.items()}
            if set(values.values()) != {_text(mine_packages.get(package))}:
                differences.append(Difference(f"package {package}", _text(mine_packages.get(package)), values))
    return differences


def _text(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


def render(differences: list[Difference], *, run_id: str, ranks: int, submitter: bool = False) -> str:
    """The printed report: a headline naming what the ranks were compared with, then one line per difference."""
    whom, where = ("the submitting process", "at submit") if submitter else ("this process", "here")
    if not differences:
        return f"{run_id}: the {ranks} rank(s) reported the same versions and packages as {whom}"
    return "\n".join([f"{run_id}: {len(differences)} difference(s) between {whom} and the ranks:",
                      *(f"  {d.line(where)}" for d in differences)])


def environment_here() -> dict[str, Any]:
    """This process's report, in the ranks' form (imports torch for its CUDA/NCCL versions; reads the packages)."""
    try:
        import torch  # noqa: F401 - imported for _cuda_report, which reads only modules already imported
    except ImportError:
        pass
    from nbtrain.envreport import process_environment

    return process_environment()


def rank_environments(run: Any) -> dict[int, dict[str, Any]]:
    """The latest attempt's environment report of each rank of ``run`` (from its events)."""
    reports: dict[int, tuple[int, dict[str, Any]]] = {}
    for event in run.events():
        if event.kind.value == "env" and event.rank is not None:
            seen = reports.get(event.rank)
            if seen is None or event.attempt >= seen[0]:
                reports[event.rank] = (event.attempt, dict(event.data))
    return {rank: data for rank, (_, data) in sorted(reports.items())}


def _report(run_id: str) -> str:
    from nbtrain import client, envreport
    from nbtrain.errors import NbtrainError

    run = client.attach(run_id, watch=False)
    ranks = rank_environments(run)
    if not ranks:
        raise NbtrainError(f"run {run.id}: no rank reported its environment (did the gang start? "
                           f"`nbtrain status {run.id}`).")
    submitter = envreport.load(run.store.run_dir(run.id))
    differences = env_diff(submitter or environment_here(), ranks)
    return render(differences, run_id=run.id, ranks=len(ranks), submitter=submitter is not None)


def register(sub: Any) -> None:
    """Add ``nbtrain env-diff``."""
    p = sub.add_parser("env-diff", help="differences between a run's ranks' environments and this machine's")
    p.add_argument("run", help="run id or a unique prefix of one")
    p.set_defaults(handler=_cmd_env_diff)


def _cmd_env_diff(args: argparse.Namespace) -> int:
    print(_report(args.run))
    sys.stdout.flush()
    return 0


def register_magic(sub: Any) -> None:
    """Add ``%nbtrain env-diff``."""
    p = sub.add_parser("env-diff", add_help=False)
    p.add_argument("run")
    p.set_defaults(magic=_magic_env_diff)


def _magic_env_diff(args: argparse.Namespace, shell: Any) -> None:
    print(_report(args.run))
