"""The pre-production ladder of ``nbtrain validate`` as pure decisions (no I/O, no processes).

Rungs run in :data:`LADDER` order. Each has prerequisites: a rung whose prerequisite failed or was skipped is
skipped with a reason naming it. A failed rung is blamed on the job (its code, its configuration: exit code 1)
or on the platform (this machine, the launcher, the backend: exit code 4); the platform wins, because a job
cannot be judged on a broken platform. The JUnit XML CI servers read is rendered here too.
"""

from __future__ import annotations

import enum
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from xml.etree import ElementTree

from nbtrain.model import Failure

__all__ = ["LADDER", "PREREQUISITES", "Blame", "Outcome", "Rung", "Status", "blame_of_failure", "exit_code",
           "junit_xml", "render", "skip_reason"]

EXIT_OK, EXIT_JOB, EXIT_PLATFORM = 0, 1, 4


class Rung(enum.Enum):
    """One check of the ladder; the value is its JUnit testcase name."""

    CONFIG = "config"
    IMPORTS = "imports"
    PATHS = "paths"
    SINGLE = "single-process"
    DISTRIBUTED = "distributed"
    CHECKPOINT = "checkpoint"
    RESUME = "resume"


#: What each rung checks (the JUnit testcase's classname is ``nbtrain.validate``; this is its text).
DESCRIPTIONS: Mapping[Rung, str] = {
    Rung.CONFIG: "nbtrain.toml, the job's spec, its files against manifest.json, its Kubernetes manifests",
    Rung.IMPORTS: "train.py's imports resolve in a fresh interpreter",
    Rung.PATHS: "data paths readable, checkpoint directory writable",
    Rung.SINGLE: "1 process for N steps",
    Rung.DISTRIBUTED: "1 node x 2 processes for N steps (saves checkpoints when the job does)",
    Rung.CHECKPOINT: "a checkpoint of the distributed run is complete and loads",
    Rung.RESUME: "a new attempt resumes from that checkpoint and continues",
}

LADDER: tuple[Rung, ...] = tuple(Rung)
PREREQUISITES: Mapping[Rung, tuple[Rung, ...]] = {
    Rung.CONFIG: (),
    Rung.IMPORTS: (Rung.CONFIG,),
    Rung.PATHS: (Rung.CONFIG,),
    Rung.SINGLE: (Rung.IMPORTS, Rung.PATHS),
    Rung.DISTRIBUTED: (Rung.SINGLE,),
    Rung.CHECKPOINT: (Rung.DISTRIBUTED,),
    Rung.RESUME: (Rung.CHECKPOINT,),
}


class Status(enum.Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


class Blame(enum.Enum):
    """Whose fault a failed rung is: the job's (fix the code or config) or the platform's (fix the machine)."""

    JOB = "job"
    PLATFORM = "platform"


@dataclass(frozen=True)
class Outcome:
    """The result of one rung. ``message`` names the rank and the reason for a failure, the reason for a skip."""

    rung: Rung
    status: Status
    message: str = ""
    blame: Blame | None = None
    seconds: float = 0.0
    output: str = ""  # shown as the testcase's system-out (e.g. the failing rank's traceback)

    @classmethod
    def passed(cls, rung: Rung, message: str = "", *, seconds: float = 0.0, output: str = "") -> Outcome:
        return cls(rung, Status.PASSED, message, None, seconds, output)

    @classmethod
    def failed(cls, rung: Rung, message: str, blame: Blame, *, seconds: float = 0.0, output: str = "") -> Outcome:
        return cls(rung, Status.FAILED, message, blame, seconds, output)

    @classmethod
    def skipped(cls, rung: Rung, reason: str, *, seconds: float = 0.0) -> Outcome:
        return cls(rung, Status.SKIPPED, reason, None, seconds)


def skip_reason(rung: Rung, done: Mapping[Rung, Outcome]) -> str | None:
    """Why ``rung`` must be skipped given the outcomes so far (a prerequisite failed or was skipped), else None."""
    for need in PREREQUISITES[rung]:
        outcome = done.get(need)
        if outcome is None:
            return f"needs the {need.value} rung, which did not run"
        if outcome.status is Status.FAILED:
            return f"needs the {need.value} rung, which failed"
        if outcome.status is Status.SKIPPED:
            return f"needs the {need.value} rung, which was skipped"
    return None


def blame_of_failure(failure: Failure | None) -> Blame:
    """Whose fault a failed run is, from its failure report.

    A rank's own exception, exit code or signal is the job's (its code raised, exited or crashed). A failure no
    rank can be blamed for (the gang did not start, the launcher or rendezvous failed) is the platform's.
    """
    if failure is None:
        return Blame.PLATFORM
    if failure.exc_type or failure.rank is not None:
        return Blame.JOB
    return Blame.PLATFORM


def exit_code(outcomes: Sequence[Outcome]) -> int:
    """0 when no rung failed; 4 when any failure is the platform's; else 1 (the job is broken)."""
    blames = {o.blame for o in outcomes if o.status is Status.FAILED}
    if not blames:
        return EXIT_OK
    return EXIT_PLATFORM if Blame.PLATFORM in blames else EXIT_JOB


def render(outcomes: Sequence[Outcome]) -> str:
    """One line per rung for a terminal: ``PASS config (0.1 s)``, ``FAIL resume [job]: rank 1 failed: ...``."""
    words = {Status.PASSED: "PASS", Status.FAILED: "FAIL", Status.SKIPPED: "SKIP"}
    lines = []
    for o in outcomes:
        blame = f" [{o.blame.value}]" if o.blame else ""
        text = f": {o.message}" if o.message else ""
        lines.append(f"{words[o.status]} {o.rung.value}{blame} ({o.seconds:.1f} s){text}")
    return "\n".join(lines)


# characters XML 1.0 cannot carry at all (ElementTree writes them as they are: a parser then rejects the report)
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def xml_text(text: str) -> str:
    """``text`` as XML 1.0 can carry it: a rank's output holds ANSI colours (ESC), carriage returns of progress
    bars and the odd NUL; the characters XML forbids become ``\\xNN`` (the rest is escaped by ElementTree)."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def junit_xml(outcomes: Sequence[Outcome], *, suite: str, timestamp: float | None = None) -> str:
    """JUnit XML (the Ant schema GitHub Actions, GitLab CI and Jenkins read): one testcase per rung."""
    failures = sum(o.status is Status.FAILED for o in outcomes)
    skipped = sum(o.status is Status.SKIPPED for o in outcomes)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() if timestamp is None else timestamp))
    root = ElementTree.Element("testsuites", tests=str(len(outcomes)), failures=str(failures), errors="0",
                               skipped=str(skipped))
    total = sum(o.seconds for o in outcomes)
    node = ElementTree.SubElement(root, "testsuite", name=suite, tests=str(len(outcomes)), failures=str(failures),
                                  errors="0", skipped=str(skipped), time=f"{total:.3f}", timestamp=stamp)
    for o in outcomes:
        case = ElementTree.SubElement(node, "testcase", classname="nbtrain.validate", name=o.rung.value,
                                      time=f"{o.seconds:.3f}")
        if o.status is Status.FAILED:
            blame = o.blame.value if o.blame else "job"
            failure = ElementTree.SubElement(case, "failure", message=xml_text(f"[{blame}] {o.message}"), type=blame)
            failure.text = xml_text(f"{o.rung.value} ({DESCRIPTIONS[o.rung]}) failed: {o.message}")
        elif o.status is Status.SKIPPED:
            ElementTree.SubElement(case, "skipped", message=xml_text(o.message))
        if o.output:
            ElementTree.SubElement(case, "system-out").text = xml_text(o.output)
    ElementTree.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(root, encoding="unicode") + "\n"
