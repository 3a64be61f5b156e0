"""A real local run keeps the Accelerate config it launched with in the attempt's directory (written by
``write_attempt_files``), and that file is, byte for byte, the config ``--dry-run`` showed; a team's file given with
``--accelerate-config`` is in it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from nbtrain.backends.local import LocalBackend
from nbtrain.bundle import capture_cell
from nbtrain.model import RunState
from nbtrain.spec import JobSpec
from nbtrain.store import Store

pytestmark = pytest.mark.slow


def test_the_attempt_keeps_the_config_dry_run_showed(home: Path, tmp_path: Path) -> None:
    team = tmp_path / "team.yaml"
    team.write_text("downcast_bf16: 'no'\nnum_processes: 64\n")  # harmless on CPU; the gang's shape stays nbtrain's
    bundle = capture_cell("import os\nprint('RANK', os.environ['RANK'])\n", {"__name__": "__main__"})
    store = Store()
    directory = bundle.write(store.bundles)
    backend = LocalBackend(store)
    run_id = store.new_run_id("configured")
    spec = JobSpec(name="configured", procs_per_node=2, device="cpu", accelerate_config=str(team))  # type: ignore[arg-type]
    plan = backend.plan(spec, str(directory), bundle.digest, run_id)
    shown = plan.render()
    head = f"accelerate config ({store.attempt_dir(run_id, 0) / 'accelerate.yaml'}):"
    assert head in shown
    dry_run_text = "".join(line[2:] + "\n" for line in shown.split(head + "\n", 1)[1].splitlines()
                           if not line.startswith("  from your file"))

    handle = backend.submit(plan)
    deadline = time.monotonic() + 120
    while not (status := backend.status(handle)).state.terminal:
        assert time.monotonic() < deadline, "run did not end"
        time.sleep(0.2)
    assert status.state is RunState.SUCCEEDED, status

    written = store.attempt_dir(run_id, 0) / "accelerate.yaml"
    assert all(x.argv[x.argv.index("--config_file") + 1] == str(written) for x in plan.request.launchers)
    assert written.read_text() == dry_run_text
    config = yaml.safe_load(written.read_text())
    assert config["num_processes"] == 2 and config["distributed_type"] == "MULTI_CPU"
    assert written.stat().st_mode & 0o777 == 0o600  # the store is private
