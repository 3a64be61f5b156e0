"""`%nbtrain` subcommands and `%%distributed?` help, against a real finished run."""

from __future__ import annotations

from typing import Any

import pytest
from IPython.core.error import UsageError

CELL = '''%%distributed --nodes 1 --gpus 2 --name managed --out run --block
import torch.distributed as dist
from accelerate import Accelerator
accelerator = Accelerator()
print(f"hello from rank {accelerator.process_index}")
'''


@pytest.mark.slow
def test_runs_status_logs_attach(shell: Any, run_cell: Any, capsys: pytest.CaptureFixture[str]) -> None:
    run_cell(CELL)
    run = shell.user_ns["run"]
    capsys.readouterr()
    run_cell("%nbtrain runs")
    table = capsys.readouterr().out
    assert "RUN" in table and run.id in table and "succeeded" in table and "1x2" in table
    run_cell(f"%nbtrain status {run.id}")
    assert "succeeded" in capsys.readouterr().out
    run_cell(f"%nbtrain logs {run.id} --rank 1")
    assert "hello from rank 1" in capsys.readouterr().out
    run_cell(f"%nbtrain attach {run.id[:8]} --out again")
    assert shell.user_ns["again"].id == run.id


def test_unknown_run_and_bad_subcommand(shell: Any, run_cell: Any) -> None:
    with pytest.raises(UsageError, match="no run 'nope-000000'"):
        run_cell("%nbtrain status nope-000000")
    with pytest.raises(UsageError, match="invalid choice"):
        run_cell("%nbtrain frobnicate")


def test_doctor_reports_each_check(shell: Any, run_cell: Any, capsys: pytest.CaptureFixture[str]) -> None:
    run_cell("%nbtrain doctor")
    out = capsys.readouterr().out
    for name in ("python", "torch", "accelerate", "devices", "store"):
        assert name in out
    assert "FAIL" not in out


def test_distributed_help(shell: Any) -> None:
    doc = shell.find_cell_magic("distributed").__doc__
    for flag in ("--nodes", "--gpus", "--out", "--block", "--dry-run", "--max-capture-mb", "--allow-secrets"):
        assert flag in doc


@pytest.mark.slow
def test_rerun_and_resume_subcommands(shell: Any, run_cell: Any, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(Exception, match="first time fails"):
        run_cell('''%%distributed --nodes 1 --gpus 1 --name flaky --out run --block --no-monitor
import nbtrain
from accelerate import Accelerator
accelerator = Accelerator()
start = nbtrain.restore(accelerator)
nbtrain.save_checkpoint(accelerator, start)
if start == 0:
    raise RuntimeError("first time fails")
start
''')
    failed = shell.user_ns["run"]
    run_cell("%nbtrain rerun --out again")
    again = shell.user_ns["again"]
    assert again.id != failed.id and again.spec == failed.spec
    assert again.wait(timeout=120, raise_on_failure=False).value == "failed"  # fresh run: no checkpoint, fails again
    run_cell(f"%nbtrain resume {failed.id} --out resumed")
    resumed = shell.user_ns["resumed"]
    assert resumed.id == failed.id and resumed.result(timeout=120) == 1  # restored step 0's checkpoint
    assert "resumed as attempt 1" in capsys.readouterr().out
