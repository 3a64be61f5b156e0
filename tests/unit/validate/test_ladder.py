"""The ladder's decisions: skips follow prerequisites, blame picks the exit code, JUnit XML parses."""

from __future__ import annotations

from xml.etree import ElementTree

from nbtrain.model import Failure
from nbtrain.spec import JobSpec
from nbtrain.validate.imports import blame_of_imports, imports_of
from nbtrain.validate.ladder import (
    LADDER,
    Blame,
    Outcome,
    Rung,
    Status,
    blame_of_failure,
    exit_code,
    junit_xml,
    skip_reason,
)
from nbtrain.validate.runner import absolute_paths, local_spec


def test_a_failed_prerequisite_skips_every_rung_above_it() -> None:
    done = {Rung.CONFIG: Outcome.passed(Rung.CONFIG), Rung.IMPORTS: Outcome.passed(Rung.IMPORTS),
            Rung.PATHS: Outcome.passed(Rung.PATHS),
            Rung.SINGLE: Outcome.failed(Rung.SINGLE, "rank 0 failed: ValueError: x", Blame.JOB)}
    assert skip_reason(Rung.DISTRIBUTED, done) == "needs the single-process rung, which failed"
    done[Rung.DISTRIBUTED] = Outcome.skipped(Rung.DISTRIBUTED, "needs the single-process rung, which failed")
    assert skip_reason(Rung.CHECKPOINT, done) == "needs the distributed rung, which was skipped"
    assert skip_reason(Rung.PATHS, done) is None


def test_the_ladder_order_puts_prerequisites_first() -> None:
    from nbtrain.validate.ladder import PREREQUISITES

    for index, rung in enumerate(LADDER):
        assert all(LADDER.index(need) < index for need in PREREQUISITES[rung])


def test_exit_code_platform_over_job_over_pass() -> None:
    ok = Outcome.passed(Rung.CONFIG)
    job = Outcome.failed(Rung.RESUME, "rank 1 failed", Blame.JOB)
    platform = Outcome.failed(Rung.SINGLE, "accelerate missing", Blame.PLATFORM)
    skipped = Outcome.skipped(Rung.CHECKPOINT, "no checkpoint")
    assert exit_code([ok, skipped]) == 0
    assert exit_code([ok, job]) == 1
    assert exit_code([ok, job, platform]) == 4


def test_blame_of_a_failed_run() -> None:
    assert blame_of_failure(Failure("raised", rank=1, exc_type="ValueError", message="x")) is Blame.JOB
    assert blame_of_failure(Failure("exited", rank=0, exit_code=3)) is Blame.JOB
    assert blame_of_failure(Failure("the gang did not start: rendezvous timed out")) is Blame.PLATFORM
    assert blame_of_failure(None) is Blame.PLATFORM


def test_blame_of_imports() -> None:
    blame, message = blame_of_imports({"accelerate": "ModuleNotFoundError: No module named 'accelerate'"}, [])
    assert blame is Blame.PLATFORM and "install torch and accelerate" in message
    blame, message = blame_of_imports({"sklearn.datasets": "ModuleNotFoundError: No module named 'sklearn'"},
                                      ["numpy==2.0"])
    assert blame is Blame.JOB and "not in requirements.txt" in message
    blame, message = blame_of_imports({"mylib": "RuntimeError: boom"}, [])
    assert blame is Blame.JOB and message == "mylib: RuntimeError: boom"


def test_imports_of_collects_absolute_imports() -> None:
    source = "import os\nimport torch.nn as nn\nfrom a.b import c, d\nfrom . import x\ndef f():\n    import json\n"
    assert imports_of(source) == [("os", []), ("torch.nn", []), ("a.b", ["c", "d"]), ("json", [])]


def test_local_spec_is_a_small_cpu_gang_with_the_step_budget() -> None:
    spec = JobSpec(name="big", nodes=4, procs_per_node=8, backend="kubernetes", image="x:1", namespace="team",
                   env={"A": "1"}, max_restarts=3)
    small = local_spec(spec, 2, 7, 60.0)
    assert (small.backend, small.nodes, small.procs_per_node, small.device.value) == ("local", 1, 2, "cpu")
    assert small.env == {"A": "1", "NBTRAIN_MAX_STEPS": "7"}
    assert (small.namespace, small.image, small.max_restarts, small.timeout_s, small.tracking) == (
        None, None, 0, 60.0, False)
    until = local_spec(spec, 2, 7, 60.0, until_checkpoint=True)  # the distributed rung: on to the first checkpoint
    assert until.env == {"A": "1", "NBTRAIN_MAX_STEPS": "7", "NBTRAIN_MAX_STEPS_UNTIL_CHECKPOINT": "1"}


def test_absolute_paths() -> None:
    assert absolute_paths({"DATA": "/data/x", "URL": "file:///mnt/y", "LR": "0.1", "REL": "data/z"}) == {
        "DATA": "/data/x", "URL": "/mnt/y"}


def test_junit_xml_parses_with_one_testcase_per_rung() -> None:
    outcomes = [Outcome.passed(Rung.CONFIG, seconds=0.5),
                Outcome.failed(Rung.IMPORTS, "sklearn: ModuleNotFoundError <&>", Blame.JOB, output="trace"),
                Outcome.skipped(Rung.PATHS, "needs the config rung")]
    root = ElementTree.fromstring(junit_xml(outcomes, suite="s", timestamp=0).split("\n", 1)[1])
    suite = root.find("testsuite")
    assert suite is not None and suite.get("failures") == "1" and suite.get("skipped") == "1"
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert list(cases) == ["config", "imports", "paths"]
    failure = cases["imports"].find("failure")
    assert failure is not None and failure.get("message") == "[job] sklearn: ModuleNotFoundError <&>"
    assert cases["imports"].findtext("system-out") == "trace"
    assert cases["paths"].find("skipped") is not None
    assert Status.PASSED.value == "passed"


def test_junit_xml_carries_rank_output_with_control_characters() -> None:
    # a traceback as a terminal shows it: ANSI colours (ESC), a progress bar's carriage returns, a NUL
    output = "\x1b[31mTraceback\x1b[0m (most recent call last)\r\n  step 3/10\r\x00done\n"
    outcomes = [Outcome.failed(Rung.RESUME, "rank 0 failed: \x1b[1mRuntimeError\x1b[0m", Blame.JOB, output=output)]
    root = ElementTree.fromstring(junit_xml(outcomes, suite="s", timestamp=0).split("\n", 1)[1])  # parses
    case = root.find("testsuite/testcase")
    assert case is not None
    failure = case.find("failure")
    assert failure is not None and failure.get("message") == "[job] rank 0 failed: \\x1b[1mRuntimeError\\x1b[0m"
    assert case.findtext("system-out") == "\\x1b[31mTraceback\\x1b[0m (most recent call last)\n  step 3/10\n\\x00done\n"
