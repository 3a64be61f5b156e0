"""Training throughput on GPUs: a `%%distributed --strategy S` cell vs bare `accelerate launch` of the same script.

The GPU check of issue 13, prepared to run as one short script when a GPU machine is lent. For each strategy
(DDP and FSDP by default) on 1 node x N GPUs, the same cell trains a ~100M-parameter MLP on synthetic data:
once through nbtrain (a real IPython shell, the local backend: capture, supervisor, hooks, watchdog, metrics),
once through bare ``accelerate launch`` of the bundle's own ``main.py`` with the launcher command and environment
nbtrain planned for that attempt (its generated config, flags, GPUs and thread count; nbtrain's worker module and
its NBTRAIN_* variables left out, a fresh port): the comparison is nbtrain's cost, not a configuration's.
Runs alternate (nbtrain, bare, nbtrain, ...) so machine noise hits both alike. Rank 0 times the steps after a
warm-up, with ``torch.cuda.synchronize`` around the timed window, and writes steps/s into ``BENCH_DIR``.

Prints steps/s per run, the medians and the ratio nbtrain / bare per strategy (target >= 0.99); exits 1 when a
target is missed. ``--cpu`` is a plumbing check on a machine without GPUs (DDP on CPU processes only: FSDP is
refused on CPU before anything starts).

Usage: python bench/gpu_strategies.py [--gpus 2] [--strategies ddp,fsdp] [--repeats 3] [--steps 60] [--cpu]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TARGET = 0.99  # nbtrain steps/s over bare accelerate launch's, per strategy

SETUP = """
import json, os, time
import torch
from accelerate import Accelerator
"""

BODY = """
accelerator = Accelerator()
torch.manual_seed(0)
width, depth = int(os.environ["BENCH_WIDTH"]), int(os.environ["BENCH_DEPTH"])
layers = []
for _ in range(depth):
    layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
model, optimizer = accelerator.prepare(model, optimizer)
batch = torch.randn(int(os.environ["BENCH_BATCH"]), width, device=accelerator.device)
steps, warmup = int(os.environ["BENCH_STEPS"]), int(os.environ["BENCH_WARMUP"])
synchronize = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
for step in range(steps):
    if step == warmup:
        accelerator.wait_for_everyone()
        synchronize()
        started = time.perf_counter()
    loss = model(batch).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
synchronize()
accelerator.wait_for_everyone()
elapsed = time.perf_counter() - started
if accelerator.is_main_process:
    with open(os.path.join(os.environ["BENCH_DIR"], "result.json"), "w") as handle:
        json.dump({"steps_per_s": (steps - warmup) / elapsed, "world_size": accelerator.num_processes}, handle)
"""


def _result(directory: Path) -> float:
    """Rank 0's steps/s; the gang must have had every process (a launch that lost its flags runs alone)."""
    result = json.loads((directory / "result.json").read_text())
    if result["world_size"] != int(os.environ["BENCH_PROCS"]):
        raise RuntimeError(f"{directory}: world size {result['world_size']}, expected {os.environ['BENCH_PROCS']}")
    return float(result["steps_per_s"])


def run_nbtrain(shell, header: str, bench_dir: Path, env: dict[str, str]) -> tuple[float, Path, Path]:
    """steps/s through nbtrain, the bundle's main.py and the attempt's plan.json."""
    from nbtrain.store import Store

    flags = " ".join(f"--env {k}={v}" for k, v in {**env, "BENCH_DIR": str(bench_dir)}.items())
    result = shell.run_cell(f"%%distributed {header} --name gpubench --out run {flags}\n{BODY}")
    if result.error_before_exec or result.error_in_exec:
        raise RuntimeError(result.error_before_exec or result.error_in_exec)
    run = shell.user_ns["run"]
    run.wait(progress=False)
    store = Store()
    return _result(bench_dir), store.bundles / run.record.bundle_digest / "main.py", store.attempt_dir(run.id, 0)


def bare_command(plan: dict, main: Path, port: int, bench_dir: Path) -> tuple[list[str], dict[str, str]]:
    """The one-node launcher nbtrain planned, running ``main`` instead of nbtrain's worker (pure)."""
    (launcher,) = plan["launchers"]
    argv = list(launcher["argv"])
    module = argv.index("--module")
    argv[module:] = [str(main)]  # --module nbtrain.runtime.worker BUNDLE -> the script itself
    argv[argv.index("--main_process_port") + 1] = str(port)
    env = {k: v for k, v in launcher["env"].items() if not k.startswith("NBTRAIN_")}
    env["BENCH_DIR"] = str(bench_dir)
    return argv, env


def run_bare(main: Path, attempt_dir: Path, bench_dir: Path, port: int) -> float:
    """steps/s of bare ``accelerate launch main.py`` with the launch settings nbtrain planned for the attempt."""
    plan = json.loads((attempt_dir / "plan.json").read_text())
    argv, env = bare_command(plan, main, port, bench_dir)
    done = subprocess.run(argv, env={**os.environ, **env}, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"bare accelerate launch failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return _result(bench_dir)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2, help="GPUs (processes) on the one node")
    parser.add_argument("--strategies", default="ddp,fsdp")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--cpu", action="store_true", help="plumbing check without GPUs: DDP on CPU, a tiny model")
    args = parser.parse_args()
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    if args.cpu and strategies != ["ddp"]:
        parser.error("--cpu runs DDP only (FSDP and DeepSpeed are refused on CPU): pass --strategies ddp")
    env = {"BENCH_STEPS": str(args.steps), "BENCH_WARMUP": str(args.warmup),
           "BENCH_WIDTH": "64" if args.cpu else "4096", "BENCH_DEPTH": "2" if args.cpu else "6",
           "BENCH_BATCH": "32" if args.cpu else "64"}
    os.environ["BENCH_PROCS"] = str(args.gpus)
    from scratch import scratch_home  # bench/ is on sys.path when a bench runs

    scratch_home("nbtrain-gpubench-")
    os.environ.setdefault("NBTRAIN_TRACKING", "0")  # MLflow is not what is measured here
    from IPython.core.interactiveshell import InteractiveShell

    from nbtrain.backends.local.ports import free_port

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "nbtrain")
    shell.run_cell(SETUP)
    device = "--device cpu" if args.cpu else "--device gpu"
    missed = []
    with tempfile.TemporaryDirectory() as tmp:
        for strategy in strategies:
            header = f"--nodes 1 --gpus {args.gpus} {device} --strategy {strategy}"
            ours: list[float] = []
            bare: list[float] = []
            for i in range(args.repeats):
                d1, d2 = Path(tmp) / f"{strategy}-nb{i}", Path(tmp) / f"{strategy}-bare{i}"
                d1.mkdir()
                d2.mkdir()
                speed, script, attempt = run_nbtrain(shell, header, d1, env)
                ours.append(speed)
                bare.append(run_bare(script, attempt, d2, free_port()))
                print(f"  {strategy} round {i + 1}: nbtrain {ours[-1]:.2f} steps/s   bare {bare[-1]:.2f} steps/s",
                      flush=True)
            ratio = statistics.median(ours) / statistics.median(bare)
            met = ratio >= TARGET
            print(f"{strategy}, 1 node x {args.gpus}: nbtrain {statistics.median(ours):.2f} steps/s, bare accelerate "
                  f"launch {statistics.median(bare):.2f} steps/s, ratio {ratio:.3f} (target >= {TARGET}: "
                  f"{'met' if met else 'NOT met'})", flush=True)
            if not met:
                missed.append(strategy)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
