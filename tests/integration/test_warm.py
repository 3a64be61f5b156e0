"""Warm gangs on the local backend: real agents, real forked ranks over gloo, real failures.

One 2x1 CPU gang serves the module (its agents start once, ~10 s on two cores); the tests that need another
gang (a changed --env, a short TTL, a dying owner) start their own and check it ends with zero processes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from procs import pids_with_env  # tests/support, put on sys.path by tests/conftest.py

from nbtrain.bundle import capture_cell
from nbtrain.client import submit_bundle
from nbtrain.events import EventKind
from nbtrain.gang.files import AttemptLayout
from nbtrain.gang.request import GangRequest
from nbtrain.model import RunState
from nbtrain.spec import JobSpec
from nbtrain.store import Store
from nbtrain.warm import registry
from nbtrain.warm.manage import gangs_table
from nbtrain.warm.registry import GangBusy
from nbtrain.widgets.viewmodel import MonitorLimits, MonitorModel

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TRAIN = """
import torch
from accelerate import Accelerator
accelerator = Accelerator()
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
model, opt = accelerator.prepare(model, opt)
data = torch.randn(64, 8, generator=torch.Generator().manual_seed(accelerator.process_index))
for step in range(4):
    loss = (model(data) - 1).pow(2).mean()
    accelerator.backward(loss)
    opt.step()
    opt.zero_grad()
    accelerator.log({"loss": accelerator.reduce(loss.detach(), "mean").item()}, step=step)
"""

QUICK = "from accelerate import Accelerator\nAccelerator()\n"


@pytest.fixture(scope="module")
def warm_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A store for the module's warm runs; every gang is stopped at the end and no process of one may remain."""
    root = tmp_path_factory.mktemp("warm") / "home"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NBTRAIN_HOME", str(root))
        patch.setenv("NBTRAIN_TRACKING", "0")
        yield root
        store = Store(root)
        ids = [g.id for g in registry.list_gangs(store)]
        for gang in registry.list_gangs(store):
            registry.stop_gang(gang.directory)
    left = pids_with_env(registry.MARKER, set(ids)) if ids else []
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"warm-gang processes left behind: {left}"


def _run(home: Path, cell: str, *, warm: bool = True, timeout: float = 180, **spec: object):  # type: ignore[no-untyped-def]
    full = JobSpec(**{"nodes": 2, "procs_per_node": 1, "device": "cpu", "warm": warm, **spec})  # type: ignore[arg-type]
    return submit_bundle(capture_cell(cell, {"__name__": "__main__"}), full, store=Store(home))


def _finish(run, timeout: float = 180) -> RunState:  # type: ignore[no-untyped-def]
    return run.wait(timeout=timeout, raise_on_failure=False, progress=False)


def _losses(run) -> list[tuple[int, float]]:  # type: ignore[no-untyped-def]
    return [(int(step), float(value)) for step, value in run.metrics()["loss"]]


def _gang_ids(home: Path) -> set[str]:
    return {g.id for g in registry.list_gangs(Store(home))}


def _header(run) -> dict:  # type: ignore[no-untyped-def,type-arg]
    """The monitor's header of ``run`` as the widget would send it now."""
    snapshot = run.snapshot()
    model = MonitorModel(run.id, snapshot.name, snapshot.backend, snapshot.nodes, snapshot.procs, {}, MonitorLimits())
    return model.header(snapshot, {})


def test_cold_and_warm_runs_of_one_bundle_train_identically(warm_home: Path) -> None:
    cold = _run(warm_home, TRAIN, warm=False)
    assert _finish(cold) is RunState.SUCCEEDED, cold.failure
    first = _run(warm_home, TRAIN)
    assert _finish(first) is RunState.SUCCEEDED, first.failure
    second = _run(warm_home, TRAIN)
    assert _finish(second) is RunState.SUCCEEDED, second.failure
    assert _losses(cold) == _losses(first) == _losses(second) and len(_losses(cold)) == 4
    assert len(_gang_ids(warm_home)) == 1, "the second warm run did not reuse the gang"
    notices = " ".join(str(e.data.get("message")) for e in second.events() if e.kind is EventKind.NOTICE)
    assert "warm gang" in notices and "generation" in notices, notices
    # the monitor's header says cold or warm, the gang and the generation; a clean generation is not recycled
    assert _header(cold)["warm"] is None
    (gang,) = _gang_ids(warm_home)
    assert _header(first)["warm"]["gang"] == _header(second)["warm"]["gang"] == gang
    assert _header(second)["warm"] == {"gang": gang, "generation": _generation(first) + 1, "recycled": ""}
    assert f"warm gang: {gang}, generation {_generation(second)}" in second.summary()


def test_a_rank_raising_during_a_blocked_all_reduce_is_named_and_the_next_run_is_fresh(warm_home: Path) -> None:
    cell = textwrap.dedent("""
        import time, torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        if accelerator.process_index == 1:
            time.sleep(0.5)
            raise ValueError("rank one gives up")
        accelerator.reduce(torch.ones(1), "sum")  # rank 0 waits here for a peer that never comes
    """)
    run = _run(warm_home, cell)
    assert _finish(run) is RunState.FAILED
    failure = run.failure
    assert failure is not None and failure.rank == 1 and failure.exc_type == "ValueError", failure
    status = json.loads((Store(warm_home).attempt_dir(run.id, 0) / "status.json").read_text())
    assert status["ended"] - failure.time < 5.0, "the verdict came more than 5 s after rank 1 raised"
    assert _header(run)["warm"]["recycled"] == "rank 1 raised ValueError"
    notices = " ".join(str(e.data.get("message")) for e in run.events() if e.kind is EventKind.NOTICE)
    assert "rank 1 raised ValueError (collateral: rank 0, ended by that failure)" in notices, notices
    generation = _generation(run)
    assert f"rank 1 raised ValueError (gen {generation})" in gangs_table(Store(warm_home))
    after = _run(warm_home, TRAIN)
    assert _finish(after) is RunState.SUCCEEDED, after.failure
    assert _generation(after) > generation  # new processes: nothing of the failed ranks is reused


def test_a_failed_warm_attempt_restarts_on_the_same_gang_as_a_new_generation(warm_home: Path) -> None:
    cell = textwrap.dedent("""
        import os
        from accelerate import Accelerator
        accelerator = Accelerator()
        if os.environ["NBTRAIN_ATTEMPT"] == "0" and accelerator.process_index == 1:
            raise ValueError("attempt 0 fails")
    """)
    run = _run(warm_home, cell, max_restarts=1)
    assert _finish(run) is RunState.SUCCEEDED, run.failure
    history = run.attempts()
    assert [a["state"] for a in history] == ["failed", "succeeded"], history
    store = Store(warm_home)
    first, second = (GangRequest.load(AttemptLayout(store.attempt_dir(run.id, n)).plan) for n in (0, 1))
    assert first.warm is not None and second.warm == first.warm and second.attempt == 1  # the gang it claimed
    generations = [int(str(e.data["message"]).split("generation ")[1].split()[0]) for e in run.events()
                   if e.kind is EventKind.NOTICE and str(e.data.get("message", "")).startswith("warm gang")
                   and ": generation" in str(e.data.get("message", ""))]
    assert len(generations) >= 2 and generations[-1] > generations[0], generations  # new processes for attempt 1


def test_errors_within_a_second_of_the_first_are_collected_before_the_others_are_ended(warm_home: Path) -> None:
    cell = textwrap.dedent("""
        import time
        from accelerate import Accelerator
        accelerator = Accelerator()
        if accelerator.process_index == 1:
            time.sleep(0.2)
            raise ValueError("rank one fails first")
        time.sleep(0.8)
        raise KeyError("rank zero fails 0.6 s later")
    """)
    run = _run(warm_home, cell)
    assert _finish(run) is RunState.FAILED
    assert run.failure is not None and run.failure.rank == 1 and run.failure.exc_type == "ValueError", run.failure
    errors = {e.rank: e.data.get("exc_type") for e in run.events() if e.kind is EventKind.RANK_ERROR}
    assert errors == {0: "KeyError", 1: "ValueError"}, "rank 0 was ended before its own error was collected"


def _generation(run) -> int:  # type: ignore[no-untyped-def]
    for event in run.events():
        message = str(event.data.get("message", "")) if event.kind is EventKind.NOTICE else ""
        if message.startswith("warm gang") and "generation" in message:
            return int(message.split("generation ")[1].split()[0])
    raise AssertionError(f"run {run.id} has no warm-gang notice")


def test_a_rank_killed_by_sigkill_is_named_with_its_signal(warm_home: Path) -> None:
    cell = textwrap.dedent("""
        import os, signal, torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        if accelerator.process_index == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        accelerator.reduce(torch.ones(1), "sum")
    """)
    run = _run(warm_home, cell)
    assert _finish(run) is RunState.FAILED
    failure = run.failure
    assert failure is not None and failure.rank == 1 and failure.signal == "SIGKILL", failure
    assert _header(run)["warm"]["recycled"] == "rank 1 died (SIGKILL)"


def test_destroying_the_process_group_and_leaking_dataloader_workers_do_not_reach_the_next_run(
        warm_home: Path) -> None:
    cell = textwrap.dedent("""
        import os, torch
        import torch.distributed as dist
        from torch.utils.data import DataLoader
        from accelerate import Accelerator
        accelerator = Accelerator()
        loader = DataLoader(list(range(8)), batch_size=2, num_workers=1, persistent_workers=True)
        LEAK = iter(loader)
        next(LEAK)
        workers = [p for p in os.listdir("/proc") if p.isdigit() and
                   open(f"/proc/{p}/stat").read().rsplit(")", 1)[-1].split()[1] == str(os.getpid())]
        print("workers", " ".join(workers), flush=True)
        accelerator.wait_for_everyone()
        dist.destroy_process_group()
    """)
    run = _run(warm_home, cell)
    assert _finish(run) is RunState.SUCCEEDED, run.failure
    line = next(x for x in run.logs(0).splitlines() if x.startswith("workers"))
    workers = [int(p) for p in line.split()[1:]]
    assert workers, line
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers), f"DataLoader workers {workers} outlived the run"
    # the post-run check found them: the generation was recycled, saying why (the run itself succeeded)
    assert _header(run)["warm"]["recycled"].startswith("leaked"), _header(run)
    after = _run(warm_home, TRAIN)
    assert _finish(after) is RunState.SUCCEEDED, after.failure


def test_an_edited_local_module_is_imported_afresh(warm_home: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "helper_mod.py").write_text("VALUE = 'first'\n")
    cell = "import helper_mod\nfrom accelerate import Accelerator\nAccelerator()\nprint('value', helper_mod.VALUE)\n"
    one = _run(warm_home, cell)
    assert _finish(one) is RunState.SUCCEEDED, one.failure
    (tmp_path / "helper_mod.py").write_text("VALUE = 'second'\n")
    two = _run(warm_home, cell)
    assert _finish(two) is RunState.SUCCEEDED, two.failure
    assert "value first" in one.logs(0) and "value second" in two.logs(0)


def test_a_busy_gang_refuses_a_second_run_and_a_cancel_ends_a_blocked_one(warm_home: Path) -> None:
    blocked = textwrap.dedent("""
        import time, torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        print("ready", flush=True)
        if accelerator.process_index == 0:
            time.sleep(600)
        accelerator.reduce(torch.ones(1), "sum")
    """)
    run = _run(warm_home, blocked)
    deadline = time.monotonic() + 120
    while "ready" not in run.logs(1):
        assert time.monotonic() < deadline, "the blocked run never started"
        time.sleep(0.1)
    with pytest.raises(GangBusy, match=f"running run {run.id}"):
        _run(warm_home, TRAIN)
    started = time.monotonic()
    run.cancel()
    assert run.status() is RunState.CANCELLED
    assert time.monotonic() - started < 20
    # no step boundary is reached in the Stop's grace: the ranks are killed and the generation recycled
    assert _header(run)["warm"]["recycled"].startswith("cancelled: no step boundary within"), _header(run)
    after = _run(warm_home, TRAIN)
    assert _finish(after) is RunState.SUCCEEDED, after.failure
    notices = " ".join(str(e.data.get("message")) for e in after.events() if e.kind is EventKind.NOTICE)
    assert f"the ranks of run {run.id} were recycled" in notices and "cancelled" in notices, notices


def test_a_stop_of_a_training_run_ends_it_at_a_step_boundary_and_the_gang_stays_warm(warm_home: Path) -> None:
    cell = textwrap.dedent("""
        import time, torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        model, opt = accelerator.prepare(model, opt)
        for step in range(100000):
            loss = model(torch.ones(2, 4)).pow(2).mean()
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
            accelerator.log({"loss": loss.item()}, step=step)
            if step == 3:
                print("ready", flush=True)
            time.sleep(0.01 * (1 + accelerator.process_index))  # ranks reach each boundary at different times
    """)
    run = _run(warm_home, cell)
    deadline = time.monotonic() + 120
    while not all("ready" in run.logs(r) for r in (0, 1)):
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.1)
    started = time.monotonic()
    run.cancel()
    assert run.status() is RunState.CANCELLED
    assert time.monotonic() - started < 5, "the Stop waited for its grace instead of a step boundary"
    events = list(run.events())
    reason = next(e.data.get("reason") for e in events if e.kind is EventKind.STATE and e.data["state"] == "cancelled")
    done = {e.rank: e.data.get("step") for e in events if e.kind is EventKind.RANK_DONE}
    assert set(done) == {0, 1} and done[0] == done[1], f"the ranks did not stop at one step: {done}"
    assert reason == f"stopped at step {done[0]}", reason
    assert _header(run)["warm"]["recycled"] == "", "a clean Stop recycled the gang"
    gang = _header(run)["warm"]["gang"]
    after = _run(warm_home, TRAIN)
    assert _finish(after) is RunState.SUCCEEDED, after.failure
    assert _header(after)["warm"]["gang"] == gang
    notices = " ".join(str(e.data.get("message")) for e in after.events() if e.kind is EventKind.NOTICE)
    assert "recycled" not in notices, notices


SLEEPER = textwrap.dedent("""
    import time
    from accelerate import Accelerator
    accelerator = Accelerator()
    print("ready", flush=True)
    time.sleep(600)
""")


def _ready(run) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 120
    while not all("ready" in run.logs(r) for r in (0, 1)):
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.1)


def _ctrl_c_in_wait() -> threading.Thread:
    """Once the main thread is inside ``Run.wait``, SIGINT this process, as Ctrl-C (a kernel's interrupt) does: the
    waiting main thread gets a KeyboardInterrupt from Python's own SIGINT handler."""
    main = threading.main_thread().ident

    def waiting() -> bool:
        frame = sys._current_frames().get(main or 0)
        while frame is not None:
            if frame.f_code.co_name == "wait" and frame.f_code.co_filename.endswith("client/run.py"):
                return True
            frame = frame.f_back
        return False

    def fire() -> None:
        deadline = time.monotonic() + 60
        while not waiting() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=fire, daemon=True)
    thread.start()
    return thread


def test_ctrl_c_while_waiting_for_a_warm_run_stops_the_wait_and_says_how_to_cancel(warm_home: Path) -> None:
    run = _run(warm_home, SLEEPER)
    _ready(run)
    with pytest.raises(KeyboardInterrupt) as interrupted:
        _ctrl_c_in_wait()
        run.wait(timeout=150, progress=False)
    message = str(interrupted.value)
    assert f"stopped waiting for run {run.id}; it is still running on warm gang" in message, message
    assert f"run.cancel(), %nbtrain cancel {run.id}" in message, message
    time.sleep(1.0)
    assert run.status() is RunState.RUNNING, "Ctrl-C while waiting ended a warm run"
    run.cancel()
    assert run.status() is RunState.CANCELLED


def test_ctrl_c_while_waiting_for_a_cold_run_cancels_it(warm_home: Path) -> None:
    run = _run(warm_home, SLEEPER, warm=False)
    _ready(run)
    with pytest.raises(KeyboardInterrupt):
        _ctrl_c_in_wait()
        run.wait(timeout=150, progress=False)
    assert run.status() is RunState.CANCELLED


PROBE = textwrap.dedent("""
    import json, os, signal, sys
    import extra_mod
    from accelerate import Accelerator
    Accelerator()
    names = ["SIGINT", "SIGTERM", "SIGPIPE", "SIGHUP", "SIGCHLD", "SIGQUIT", "SIGUSR1", "SIGXFSZ", "SIGALRM"]
    print("PROBE", json.dumps({
        "signals": {name: repr(signal.getsignal(getattr(signal, name))) for name in names},
        "path": sys.path, "pythonpath": os.environ.get("PYTHONPATH"), "extra": extra_mod.__file__}), flush=True)
""")


def _probe(run) -> dict:  # type: ignore[no-untyped-def,type-arg]
    assert _finish(run) is RunState.SUCCEEDED, run.failure
    line = next(x for x in run.logs(0).splitlines() if x.startswith("PROBE "))
    return json.loads(line[len("PROBE "):])  # type: ignore[no-any-return]


def test_a_warm_rank_has_the_pythonpath_and_signal_dispositions_of_a_cold_one(warm_home: Path, tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "extra_mod.py").write_text("VALUE = 1\n")
    monkeypatch.chdir(tmp_path)
    env = {"PYTHONPATH": str(extra)}
    cold, warm = _probe(_run(warm_home, PROBE, warm=False, env=env)), _probe(_run(warm_home, PROBE, env=env))
    assert warm["signals"] == cold["signals"], (warm["signals"], cold["signals"])
    assert warm["pythonpath"] == cold["pythonpath"] == str(extra)
    assert warm["extra"] == cold["extra"] == str(extra / "extra_mod.py")
    assert warm["path"] == cold["path"], (warm["path"], cold["path"])


def test_a_changed_env_gets_a_gang_of_its_own_and_the_old_idle_one_stops(warm_home: Path) -> None:
    warmup = _run(warm_home, QUICK)  # the module's gang exists and is idle
    assert _finish(warmup) is RunState.SUCCEEDED, warmup.failure
    before = _gang_ids(warm_home)
    assert before and pids_with_env(registry.MARKER, before)
    run = _run(warm_home, TRAIN, env={"OMP_NUM_THREADS": "1", "NBTRAIN_TEST_FLAVOUR": "other"})
    assert _finish(run) is RunState.SUCCEEDED, run.failure
    new = _gang_ids(warm_home) - before
    assert len(new) == 1, (before, _gang_ids(warm_home))
    deadline = time.monotonic() + 15
    while pids_with_env(registry.MARKER, before) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pids_with_env(registry.MARKER, before), "the old gang's processes outlived the change of key"
    notices = " ".join(str(e.data.get("message")) for e in run.events() if e.kind is EventKind.NOTICE)
    (old,) = before
    assert f"warm gang {old} was stopped: this cell changed --env" in notices, notices
    (gang,) = new
    registry.stop_gang(registry.find_gang(Store(warm_home), gang))
    assert not pids_with_env(registry.MARKER, {gang})


def test_a_cell_submitted_as_soon_as_the_run_ends_finds_the_gang_free(warm_home: Path) -> None:
    failing = "from accelerate import Accelerator\nAccelerator()\nraise RuntimeError('this cell fails')\n"
    for turn, cell in enumerate((QUICK, QUICK, failing, QUICK, QUICK, failing, QUICK, QUICK)):
        run = _run(warm_home, cell)  # GangBusy here: the previous run's verdict was seen before its release
        if turn % 2:
            _finish(run)  # what a notebook does
        else:
            while not run.status().terminal:  # the earliest moment anyone can see the run end
                time.sleep(0.002)
            busy = [g.state for g in registry.list_gangs(Store(warm_home)) if g.state.startswith("busy")]
            assert not busy, f"the run's verdict is out but %nbtrain gangs still says {busy}"
        assert run.status() is (RunState.FAILED if cell is failing else RunState.SUCCEEDED), run.failure


def test_a_killed_supervisor_fails_the_run_and_leaves_no_process_of_it(warm_home: Path) -> None:
    cell = textwrap.dedent("""
        import os, time
        from accelerate import Accelerator
        accelerator = Accelerator()
        child = os.fork()  # a process of the run the rank's own ending does not take along
        if child == 0:
            time.sleep(600)
            os._exit(0)
        print("ready", os.getpid(), child, flush=True)
        time.sleep(600)
    """)
    run = _run(warm_home, cell)
    deadline = time.monotonic() + 120
    while not all("ready" in run.logs(r) for r in (0, 1)):
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.1)
    started = {int(p) for r in (0, 1) for p in run.logs(r).split("ready", 1)[1].split()[:2]}
    assert started <= set(pids_with_env("NBTRAIN_RUN_ID", {run.id})), "the forked ranks are not found by run id"
    status = json.loads((Store(warm_home).attempt_dir(run.id, 0) / "status.json").read_text())
    os.kill(int(status["supervisor_pid"]), signal.SIGKILL)
    assert _finish(run, timeout=60) is RunState.FAILED
    assert run.failure is not None and "supervisor" in run.failure.reason, run.failure
    deadline = time.monotonic() + 10
    while pids_with_env("NBTRAIN_RUN_ID", {run.id}) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pids_with_env("NBTRAIN_RUN_ID", {run.id}), "processes of the run outlived its supervisor"
    after = _run(warm_home, QUICK)
    assert _finish(after) is RunState.SUCCEEDED, after.failure


OWNER = """
import json
import sys
import time
from nbtrain.bundle import capture_cell
from nbtrain.client import submit_bundle
from nbtrain.events import EventKind
from nbtrain.spec import JobSpec
from nbtrain.store import Store
from nbtrain.warm import registry

def run_once():
    run = submit_bundle(capture_cell("from accelerate import Accelerator\\nAccelerator()\\n", {"__name__": "__main__"}),
                        JobSpec(nodes=2, procs_per_node=1, device="cpu", warm=True, warm_ttl_s=float(sys.argv[2])),
                        store=Store(sys.argv[1]))
    print(run.wait(timeout=200, raise_on_failure=False, progress=False).value, flush=True)
    return run

run_once()
if sys.argv[3] == "linger":
    (first,) = [p for p in (Store(sys.argv[1]).root / "gangs").iterdir() if p.is_dir()]
    while registry.gang_pids(first.name):  # its idle TTL ends it
        time.sleep(0.2)
    again = run_once()  # the next warm run of this shape hears why it starts a new gang
    print(json.dumps([str(e.data.get("message")) for e in again.events() if e.kind is EventKind.NOTICE]), flush=True)
    for gang in registry.list_gangs(Store(sys.argv[1])):
        registry.stop_gang(gang.directory)
    print("stopped", flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize("ending", ["owner-exits", "idle-ttl"])
def test_a_gang_ends_with_zero_processes_when_its_owner_dies_or_its_ttl_passes(request: pytest.FixtureRequest,
                                                                              ending: str) -> None:
    home = Path(tempfile.mkdtemp(prefix="nbw-", dir="/tmp")) / "home"  # agent sockets: at most 107 bytes of path
    request.addfinalizer(lambda: shutil.rmtree(home.parent, ignore_errors=True))
    env = {**os.environ, "NBTRAIN_HOME": str(home), "NBTRAIN_TRACKING": "0"}
    linger = ending == "idle-ttl"
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(home), "2" if linger else "1800",
                              "linger" if linger else "exit"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "succeeded"
        (gang,) = _gang_ids(home)
        deadline = time.monotonic() + 30
        while pids_with_env(registry.MARKER, {gang}) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not pids_with_env(registry.MARKER, {gang}), f"the {ending} gang left processes behind"
        assert owner.poll() is None if linger else True
        if linger:  # the same kernel's next warm run of this shape: told why its start is not warm
            assert owner.stdout.readline().strip() == "succeeded"
            notices = " ".join(json.loads(owner.stdout.readline()))
            assert f"warm gang {gang} of this shape ended" in notices, notices
            assert "it was idle for" in notices and "(--warm-ttl 2 s)" in notices, notices
            assert owner.stdout.readline().strip() == "stopped"
    finally:
        owner.kill()
        owner.wait()
