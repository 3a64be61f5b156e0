"""Warm gangs: a changed cell -> first step on all ranks, cold nbtrain vs warm nbtrain vs bare accelerate launch.

A 2x2 CPU gang, side by side in one run, alternating so machine noise hits every side alike. Each round
changes the cell (another learning rate), so nothing is cached by content. The warm side's gang is started
by one unmeasured run first (its agents import torch once); every measured warm run forks new ranks from it.
Then the recycle: a warm run whose rank raises, and the next changed cell, submitted as soon as the failed run's
``run.wait()`` returns, on the same gang (its first step should cost what a warm run costs: the failed ranks are
gone, the agents are ready). The recycle kills the failed generation's ranks (the agents stay) and releases the
gang; the registry records when (``gang.json``'s ``recycled`` entry of the failed run: its ``at``), after which
the gang is idle in ``%nbtrain gangs`` and the next generation forks from it. Printed: that moment against the
failed run's verdict (its ``ended``; negative: before it), and whether it came before the next cell was
submitted on the same gang ("off the critical path"), and the next cell's first step against cold and warm.

Targets: warm median <= 0.8 s and <= 0.25x cold; the run after a failure <= 1.5x a cold start and the recycle
off the critical path (the gang ready before the next cell, which reuses it). Exits 1 when one is missed.
Usage: python bench/warm.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from launch_overhead import BODY, SETUP, _first_step_done, run_bare  # bench/: the cold-launch measurement

WARM_TARGET_S = 0.8
WARM_RATIO = 0.25
RECYCLE_RATIO = 1.5
FAIL = """
from accelerate import Accelerator
accelerator = Accelerator()
raise RuntimeError("the bench's failing cell")
"""


def _cell(shell, flags: str, body: str, bench_dir: Path, round_no: int) -> tuple[float, str]:
    """Run ``body`` (changed by ``round_no``) as a %%distributed cell; seconds to the first step on all ranks."""
    from nbtrain.store import Store

    # the output directory travels in the cell (a literal), not in --env: the environment is part of the gang key;
    # the bare launch of the same main.py names its own directory in BENCH_DIR
    changed = (f"LR = {0.1 + round_no / 1000!r}\nBENCH_OUT = {str(bench_dir)!r}\n"
               + body.replace("lr=0.1", "lr=LR").replace('os.environ["BENCH_DIR"]',
                                                         'os.environ.get("BENCH_DIR", BENCH_OUT)'))
    start = time.time()
    result = shell.run_cell(f"%%distributed --nodes 2 --gpus 2 --name bench {flags} --out run\n{changed}")
    if result.error_before_exec or result.error_in_exec:
        raise RuntimeError(result.error_before_exec or result.error_in_exec)
    done = _first_step_done(bench_dir, 4)
    run = shell.user_ns["run"]
    run.wait(progress=False)
    return done - start, str(Store().bundles / run.record.bundle_digest / "main.py")


def _recycled_at(gang_id: str, run_id: str) -> float | None:
    """When the gang was released after ``run_id``'s generation was recycled (its ranks ended), from the registry."""
    from nbtrain.store import Store
    from nbtrain.warm import registry

    gang = registry.read_json(registry.find_gang(Store(), gang_id) / "gang.json")
    entries = [e for e in gang.get("recycled") or [] if isinstance(e, dict) and e.get("run_id") == run_id]
    return float(entries[-1]["at"]) if entries else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from scratch import scratch_home  # bench/ is on sys.path when a bench runs

    scratch_home("nbtrain-bench-")
    os.environ["NBTRAIN_TRACKING"] = "0"  # the bench measures start-up, not MLflow
    from IPython.core.interactiveshell import InteractiveShell

    from nbtrain.backends.local.ports import free_port
    from nbtrain.store import Store
    from nbtrain.warm.manage import stop_gangs

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "nbtrain")
    shell.run_cell(SETUP)
    cold: list[float] = []
    warm: list[float] = []
    bare: list[float] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            def fresh(name: str) -> Path:
                path = Path(tmp) / name
                path.mkdir()
                return path

            started = time.time()
            _cell(shell, "--warm", BODY, fresh("warmup"), 0)
            print(f"  warm gang started by its first run in {time.time() - started:.1f} s (not counted)", flush=True)
            for i in range(1, args.repeats + 1):
                t_cold, script = _cell(shell, "", BODY, fresh(f"cold{i}"), i)
                t_warm, _ = _cell(shell, "--warm", BODY, fresh(f"warm{i}"), i)
                t_bare = run_bare(script, fresh(f"bare{i}"), free_port())
                cold.append(t_cold)
                warm.append(t_warm)
                bare.append(t_bare)
                print(f"  round {i}: cold nbtrain {t_cold:.2f} s   warm nbtrain {t_warm:.2f} s   "
                      f"bare accelerate launch {t_bare:.2f} s", flush=True)
            result = shell.run_cell(f"%%distributed --nodes 2 --gpus 2 --name bench-fail --warm --out failed\n{FAIL}")
            if result.error_before_exec or result.error_in_exec:
                raise RuntimeError(result.error_before_exec or result.error_in_exec)
            failed = shell.user_ns["failed"]
            state = failed.wait(raise_on_failure=False, progress=False)
            submitted = time.time()  # the next cell goes at once, as a user's would
            t_after, _ = _cell(shell, "--warm", BODY, fresh("after-failure"), args.repeats + 1)
            failed_warm, next_warm = failed.snapshot().warm, shell.user_ns["run"].snapshot().warm
            verdict = failed.record.ended or submitted
            ready = _recycled_at(failed_warm.gang, failed.id) if failed_warm and failed_warm.gang else None
            same_gang = bool(failed_warm and next_warm and failed_warm.gang and next_warm.gang == failed_warm.gang)
            off_critical = ready is not None and ready <= submitted and same_gang
    finally:
        stop_gangs(Store())
    m_cold, m_warm, m_bare = statistics.median(cold), statistics.median(warm), statistics.median(bare)
    print("  load average (1, 5, 15 min): " + ", ".join(f"{x:.1f}" for x in os.getloadavg()))
    print(f"changed cell -> first step done on all 4 ranks (2 nodes x 2 CPU processes), median of {args.repeats}:")
    print(f"  cold nbtrain           : {m_cold:.2f} s")
    print(f"  warm nbtrain (--warm)  : {m_warm:.2f} s   ({m_warm / m_cold:.2f}x cold, {m_warm / m_bare:.2f}x bare)")
    print(f"  bare accelerate launch : {m_bare:.2f} s")
    if ready is None:
        print(f"  after a failed warm run ({state.value}): the registry recorded no recycle of run {failed.id}")
    else:
        print(f"  after a failed warm run ({state.value}): its ranks ended and the gang ready again "
              f"{ready - verdict:+.3f} s from the verdict (negative: before it), "
              f"{submitted - ready:.3f} s before the next cell was submitted")
    print(f"  next cell after the failure: {t_after:.2f} s to its first step "
          f"({t_after / m_cold:.2f}x a cold start, {t_after / m_warm:.2f}x the warm median)"
          + ("" if same_gang else "; NOT on the failed run's gang (a new gang started)"))
    print(f"  off the critical path: ready before the next cell: {str(off_critical).lower()}")
    checks = {
        f"warm median <= {WARM_TARGET_S} s": m_warm <= WARM_TARGET_S,
        f"warm <= {WARM_RATIO}x cold": m_warm <= WARM_RATIO * m_cold,
        f"run after a failure <= {RECYCLE_RATIO}x a cold start": t_after <= RECYCLE_RATIO * m_cold,
        "recycle off the critical path (gang ready before the next cell, which reuses it)": off_critical,
    }
    for name, ok in checks.items():
        print(f"  target {name}: {'met' if ok else 'NOT met'}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
