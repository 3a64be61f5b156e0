"""Triage: the user is told which rank failed first and why, not which peer noticed last."""

from __future__ import annotations

import pytest

from nbtrain.backends.triage import (
    Candidate,
    choose_first_failure,
    is_collateral,
    parse_elastic_failures,
    signal_name,
)

# What torch.distributed.elastic prints at the end of a node's launcher log (torch 2.x), with the
# noise around it: a rank's own traceback, the agent's warnings, the ChildFailedError banner.
NODE_1_LOG = """\
[rank2]: Traceback (most recent call last):
[rank2]:   File "/app/nbtrain/runtime/worker.py", line 88, in main
[rank2]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:41230
W1129 12:00:01.517000 140210 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 1233 closing signal SIGTERM
E1129 12:00:01.612000 140210 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 1 (pid: 1234) of binary: /usr/bin/python3
Traceback (most recent call last):
  File "/usr/lib/python3.11/site-packages/accelerate/commands/launch.py", line 1168, in launch_command
    multi_gpu_launcher(args)
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
nbtrain.runtime.worker FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2024-11-29_12:00:01
  host      : trainer-0
  rank      : 2 (local_rank: 0)
  exitcode  : 1 (pid: 1233)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-11-29_12:00:01
  host      : trainer-0
  rank      : 3 (local_rank: 1)
  exitcode  : -9 (pid: 1234)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 1234
============================================================
"""

NODE_0_LOG = """\
E1129 12:00:02.001000 140100 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 0 (pid: 1200) of binary: /usr/bin/python3
============================================================
nbtrain.runtime.worker FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-11-29_12:00:02
  host      : trainer-0
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 1200)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def test_parse_elastic_failures_maps_global_ranks_to_exit_codes() -> None:
    assert parse_elastic_failures(NODE_1_LOG) == {2: 1, 3: -9}
    assert parse_elastic_failures(NODE_0_LOG) == {0: 1}


def test_parse_elastic_failures_of_a_clean_log_is_empty() -> None:
    assert parse_elastic_failures("step 1 loss 0.5\nstep 2 loss 0.4\n") == {}
    assert parse_elastic_failures("") == {}


@pytest.mark.parametrize(
    ("code", "name"),
    [(-9, "SIGKILL"), (-6, "SIGABRT"), (-15, "SIGTERM"), (137, "SIGKILL"), (139, "SIGSEGV"),
     (1, None), (0, None), (128, None), (None, None)],
)
def test_signal_name(code: int | None, name: str | None) -> None:
    assert signal_name(code) == name


def _gloo_error(rank: int, time: float) -> Candidate:
    return Candidate(
        rank=rank,
        time=time,
        exc_type="RuntimeError",
        message="[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:41230",
        traceback="Traceback (most recent call last):\n  ...\nRuntimeError: Connection closed by peer",
    )


def test_collateral_errors_are_recognised() -> None:
    assert is_collateral(_gloo_error(0, 1.0))
    assert is_collateral(Candidate(rank=1, time=1.0, exc_type="torch.distributed.DistBackendError", message="x"))
    assert not is_collateral(Candidate(rank=1, time=1.0, exc_type="ValueError", message="bad shape"))
    assert not is_collateral(Candidate(rank=1, time=1.0, exit_code=-9))


def test_a_real_error_beats_an_earlier_collateral_one() -> None:
    real = Candidate(rank=3, time=12.0, exc_type="ValueError", message="shapes (4,) and (5,) differ",
                     traceback="Traceback ...\nValueError: shapes (4,) and (5,) differ", cell_line=7)
    failure = choose_first_failure(
        [_gloo_error(0, 10.0), real, _gloo_error(1, 11.0)],
        node_of={0: 0, 1: 0, 2: 1, 3: 1},
        last_lines={0: ["epoch 1"], 3: ["epoch 1", "about to fail"]},
        exit_codes={0: 1, 1: 1, 3: 1},
    )
    assert failure is not None
    assert (failure.rank, failure.node, failure.exc_type) == (3, 1, "ValueError")
    assert failure.message == "shapes (4,) and (5,) differ"
    assert failure.last_lines == ("epoch 1", "about to fail")
    assert failure.exit_code == 1
    assert failure.cell_line == 7
    assert failure.time == 12.0
    assert failure.summary() == "rank 3 (node 1) failed: ValueError: shapes (4,) and (5,) differ (cell line 7)"


def test_among_real_errors_the_earliest_wins() -> None:
    late = Candidate(rank=0, time=5.0, exc_type="KeyError", message="'x'")
    early = Candidate(rank=2, time=4.0, exc_type="ZeroDivisionError", message="division by zero")
    failure = choose_first_failure([late, early], node_of={}, last_lines={}, exit_codes={})
    assert failure is not None
    assert failure.rank == 2
    assert failure.node is None  # unknown node is left out, not guessed
    assert failure.reason == "the training code raised an exception"


def test_oom_killed_rank_is_blamed_with_a_hint_about_memory() -> None:
    # rank 3 was SIGKILLed (exit code only known from the launcher's Root Cause block); its peers
    # saw the connection drop *before* the launcher noticed the kill.
    killed = Candidate(rank=3, time=20.5)
    failure = choose_first_failure(
        [_gloo_error(2, 20.1), killed],
        node_of={2: 1, 3: 1},
        last_lines={3: ["allocating 40 GiB"]},
        exit_codes=parse_elastic_failures(NODE_1_LOG),
    )
    assert failure is not None
    assert failure.rank == 3
    assert failure.exit_code == -9
    assert failure.signal == "SIGKILL"
    assert "OOM" in failure.reason
    assert "memory" in failure.reason
    assert "SIGKILL" in failure.summary()


def test_other_signals_are_named_in_the_reason() -> None:
    failure = choose_first_failure([Candidate(rank=1, time=1.0, exit_code=-6)], node_of={}, last_lines={}, exit_codes={})
    assert failure is not None
    assert failure.signal == "SIGABRT"
    assert "SIGABRT" in failure.reason


def test_an_explicit_reason_is_kept() -> None:
    candidate = Candidate(rank=0, time=1.0, exit_code=-9, reason="timed out after 60 s")
    failure = choose_first_failure([candidate], node_of={0: 0}, last_lines={}, exit_codes={})
    assert failure is not None
    assert failure.reason == "timed out after 60 s"
    assert failure.signal == "SIGKILL"


def test_only_collateral_errors_still_yield_the_earliest_one() -> None:
    failure = choose_first_failure([_gloo_error(1, 2.0), _gloo_error(0, 1.0)], node_of={}, last_lines={}, exit_codes={})
    assert failure is not None
    assert failure.rank == 0


def test_no_candidate_means_no_failure_to_report() -> None:
    assert choose_first_failure([], node_of={}, last_lines={}, exit_codes={}) is None


def test_a_failure_nobody_can_be_blamed_for() -> None:
    failure = choose_first_failure(
        [Candidate(rank=None, time=1.0, reason="the launcher of node 1 exited with code 2")],
        node_of={}, last_lines={}, exit_codes={},
    )
    assert failure is not None
    assert failure.rank is None
    assert failure.summary() == "the gang failed: the launcher of node 1 exited with code 2"


def test_ranks_terminated_by_the_agent_are_victims_not_the_cause() -> None:
    victim = Candidate(rank=0, time=10.0, exit_code=-15)
    cause = Candidate(rank=1, time=10.0, exit_code=-11)
    chosen = choose_first_failure([victim, cause], node_of={0: 0, 1: 0}, last_lines={}, exit_codes={})
    assert chosen is not None and chosen.rank == 1 and chosen.signal == "SIGSEGV"
    alone = choose_first_failure([victim], node_of={0: 0}, last_lines={}, exit_codes={})
    assert alone is not None and alone.rank == 0 and alone.signal == "SIGTERM"
