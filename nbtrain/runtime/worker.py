"""Entry point of every rank: ``accelerate launch -m nbtrain.runtime.worker BUNDLE_DIR``.

Order matters and is the contract:

1. send fd 1/2 (C-level output included) to this rank's log file, so every line is attributed;
2. verify the bundle digest BEFORE unpickling anything; refuse a tampered or corrupted bundle;
3. report RANK_START and ENV, start heartbeats, install hooks (metrics, collective timeout);
4. run ``main.py`` as ``__main__``;
5. rank 0 writes the result; every rank reports RANK_DONE or RANK_ERROR (with the traceback);
6. tear down without interpreter finalisation: destroy the process group, flush, ``os._exit``.
   (gloo aborts with SIGABRT in ~20% of clean exits otherwise; a successful run must never fail.)

The "load a bundle, run it, report" part (:func:`run_bundle`) is separate from process start-up so
a long-lived worker can later run many bundles.
"""

from __future__ import annotations

import builtins
import faulthandler
import io
import os
import pickle
import platform
import socket
import sys
import threading
import traceback
import types
from pathlib import Path
from typing import Any

from nbtrain.events import EventKind
from nbtrain.runtime import context, hooks, progress, stopping, watchdog

RESULT_NAME = "__nbtrain_result__"


def redirect_output(logs_dir: str, rank: int) -> None:
    """Point fds 1 and 2 at ``logs_dir/rank-<rank>.log`` (append) and make Python's streams line-buffered."""
    Path(logs_dir).mkdir(parents=True, exist_ok=True)
    fd = os.open(Path(logs_dir) / f"rank-{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", buffering=0), encoding="utf-8", errors="replace", line_buffering=True, write_through=True)
    sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", buffering=0), encoding="utf-8", errors="replace", line_buffering=True, write_through=True)
    faulthandler.enable(file=sys.stderr)  # last words of a segfault/abort land in the rank's log


def environment_report() -> dict[str, Any]:
    """Host, versions and device of this rank (imports torch: call after the user code would anyway).

    Versions come from the imported modules (``__version__``), not from package metadata: scanning the
    installed distributions costs every rank CPU while the gang starts, and it is the modules that run.
    """
    device = "cpu"
    gpu_name = None
    versions: dict[str, str | None] = {"torch": None, "accelerate": None}
    try:
        import torch

        versions["torch"] = str(torch.__version__)
        if os.environ.get("ACCELERATE_USE_CPU", "").lower() not in ("1", "true", "yes") and torch.cuda.is_available():
            index = int(os.environ.get("LOCAL_RANK", "0")) % max(1, torch.cuda.device_count())
            device = f"cuda:{index}"
            gpu_name = torch.cuda.get_device_name(index)
    except ImportError:
        pass
    try:
        import accelerate

        versions["accelerate"] = str(accelerate.__version__)
    except ImportError:
        pass
    report: dict[str, Any] = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "python": platform.python_version(),
        "torch": versions["torch"],
        "accelerate": versions["accelerate"],
        "device": device,
        "gpu_name": gpu_name,
    }
    report.update(_cuda_report())
    if os.environ.get("LOCAL_RANK", "0") == "0":  # once per node: the ranks of a node share its packages
        report["packages"] = installed_packages()
    return report


def _cuda_report() -> dict[str, Any]:
    """CUDA runtime, NCCL and CUDA driver API versions as torch sees them (None where there is no CUDA). ``driver``
    is cudaDriverGetVersion's number (12040: the CUDA version the NVIDIA driver supports), not the driver's release."""
    cuda = nccl = driver = None
    torch = sys.modules.get("torch")
    if torch is not None:
        cuda = getattr(torch.version, "cuda", None)
        try:
            if torch.cuda.is_available():
                nccl = ".".join(str(part) for part in torch.cuda.nccl.version())
                probe = getattr(torch._C, "_cuda_getDriverVersion", None)  # the CUDA driver API version
                driver = str(probe()) if probe is not None else None
        except Exception:  # noqa: BLE001 - a version probe must not fail the report
            pass
    return {"cuda": cuda, "nccl": nccl, "driver": driver}


def installed_packages() -> dict[str, str]:
    """Every installed distribution's name (lower case) and version: one metadata scan, ~50 ms for 300."""
    from importlib import metadata

    packages: dict[str, str] = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").strip().lower().replace("_", "-")
        if name:
            packages[name] = str(dist.version)
    return dict(sorted(packages.items()))


ENV_REPORT_WAIT_S = 10.0  # how long a rank whose code is done waits for its environment report to be written


def _heartbeat(ctx: context.WorkerContext, period: float, stop: threading.Event, reported: threading.Event) -> None:
    # the environment report reads package metadata and imports torch: off the critical path (``reported`` is set
    # once it is written, so a rank whose code ends sooner waits for it instead of exiting without one)
    try:
        ctx.emit(EventKind.ENV, **environment_report())
    except Exception as error:  # noqa: BLE001 - a missing report must not stop training
        ctx.emit(EventKind.NOTICE, message=f"rank {ctx.rank}: environment report failed: {error}")
    finally:
        reported.set()
    stall_s = float(os.environ.get(progress.ENV_STALL_S, "0") or 0)
    while not stop.wait(period):
        ctx.emit(EventKind.HEARTBEAT, step=ctx.last_step, **progress.report())
        progress.self_check(ctx.rank, stall_s)


def _cell_line(manifest: dict[str, Any], tb: BaseException, main_path: str) -> int | None:
    """The user's cell line of the innermost main.py frame of ``tb``, when the error came from the cell."""
    from nbtrain.bundle.reader import cell_line

    line = None
    for frame, lineno in traceback.walk_tb(tb.__traceback__):
        if frame.f_code.co_filename == main_path:
            line = lineno
    return cell_line(manifest, line) if line is not None else None


def run_bundle(bundle_dir: Path, ctx: context.WorkerContext) -> tuple[bool, Any]:
    """Verify and run one bundle in a fresh ``__main__``. Returns (ok, result); reports errors as events."""
    from nbtrain.bundle.reader import verify_bundle

    manifest = verify_bundle(bundle_dir)
    main_path = str(bundle_dir / manifest.get("entry", "main.py"))
    module = types.ModuleType("__main__")
    module.__file__ = main_path
    module.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = module
    sys.argv = [main_path]
    if str(bundle_dir) not in sys.path:
        sys.path.insert(0, str(bundle_dir))
    modules = bundle_dir / "modules"  # local modules the cell imports, shipped with it (nbtrain.bundle.localmods)
    if modules.is_dir() and str(modules) not in sys.path:
        sys.path.insert(1, str(modules))
    source = Path(main_path).read_text(encoding="utf-8")
    try:
        exec(compile(source, main_path, "exec"), module.__dict__)
    except SystemExit as stop:
        if stop.code in (None, 0):
            return True, module.__dict__.get(RESULT_NAME)
        _report_error(ctx, stop, manifest, main_path)
        return False, None
    except BaseException as error:  # noqa: BLE001 - every failure of user code is reported, then exits 1
        _report_error(ctx, error, manifest, main_path)
        return False, None
    return True, module.__dict__.get(RESULT_NAME)


def _user_traceback(error: BaseException) -> str:
    """The traceback without nbtrain's own runner frames on top (users see their code first)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(error), error, tb or error.__traceback__))


def _annotate(text: str, manifest: dict[str, Any], main_path: str) -> str:
    """Add the user's cell line to every traceback line that points into the cell's part of main.py."""
    from nbtrain.bundle.reader import cell_line

    marker = f'File "{main_path}", line '
    out = []
    for line in text.splitlines(keepends=True):
        at = line.find(marker)
        if at >= 0:
            digits = line[at + len(marker):].split(",", 1)[0].strip()
            where = cell_line(manifest, int(digits)) if digits.isdigit() else None
            if where is not None:
                line = line.rstrip("\n") + f"  [cell line {where}]\n"
        out.append(line)
    return "".join(out)


def _report_error(ctx: context.WorkerContext, error: BaseException, manifest: dict[str, Any], main_path: str) -> None:
    text = _annotate(_user_traceback(error), manifest, main_path)
    cell_line = _cell_line(manifest, error, main_path)
    where = f" (cell line {cell_line})" if cell_line else ""
    sys.stderr.write(f"[nbtrain] rank {ctx.rank} failed{where}:\n{text}")
    sys.stderr.flush()
    ctx.emit(
        EventKind.RANK_ERROR,
        exc_type=type(error).__name__,
        message=str(error)[:2000],
        traceback=text[-20000:],
        cell_line=cell_line,
        **progress.report(),
    )


MAX_RESULT_EVENT_BYTES = 4 * 1024 * 1024


def _write_result(ctx: context.WorkerContext, value: Any) -> bool:
    """Rank 0 only: the pickled result to NBTRAIN_RESULT_PATH, or as a RESULT event when there is no path."""
    if ctx.rank != 0:
        return False
    try:
        import cloudpickle

        payload = cloudpickle.dumps(value)
    except Exception as error:  # noqa: BLE001 - an unpicklable result is reported, not fatal
        ctx.emit(EventKind.NOTICE, message=f"rank 0's result ({type(value).__name__}) could not be pickled: {error}")
        payload = pickle.dumps(None)
    if ctx.result_path is None:
        if len(payload) > MAX_RESULT_EVENT_BYTES:
            ctx.emit(EventKind.NOTICE, message=f"rank 0's result is {len(payload)} bytes pickled; results over "
                     f"{MAX_RESULT_EVENT_BYTES} bytes are not sent back — save it to shared storage instead")
            return False
        import base64

        ctx.emit(EventKind.RESULT, pickle_b64=base64.b64encode(payload).decode("ascii"))
        return True
    tmp = ctx.result_path.with_suffix(".tmp")
    tmp.write_bytes(payload)
    os.replace(tmp, ctx.result_path)
    return True


def _teardown(code: int) -> None:
    """End the process without interpreter finalisation (see module docstring)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - teardown is best effort; the exit code is what matters
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def main(argv: list[str] | None = None) -> None:
    """Process entry: see the module docstring for the order of steps."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m nbtrain.runtime.worker BUNDLE_DIR\n")
        os._exit(2)
    rank = int(os.environ.get("RANK", "0"))
    logs_dir = os.environ.get(context.ENV_LOGS_DIR)
    if logs_dir or os.environ.get(context.ENV_EVENTS_DIR):
        os.umask(0o077)  # writing into the (private) run store: logs, events, result, checkpoints for this user only
    if logs_dir:
        redirect_output(logs_dir, rank)
    ctx = context.current()
    if ctx is None:
        sys.stderr.write(f"[nbtrain] rank {rank}: {context.ENV_RUN_ID} and {context.ENV_EVENTS_DIR} or "
                         f"{context.ENV_EVENT_STREAM}=stdout must be set by the backend\n")
        _teardown(2)
        return
    ctx.emit(
        EventKind.RANK_START,
        node=ctx.node_rank,
        local_rank=ctx.local_rank,
        pid=os.getpid(),
        process=watchdog.identity(),  # pid:start-time: whoever signals this rank later checks it is still this process
        host=socket.gethostname(),
        world_size=ctx.world_size,
        stacks_signal=progress.dump_on_signal(),  # the supervisor signals only ranks that said they listen
    )
    watchdog.watch_supervisor(rank)
    stop = threading.Event()
    period = float(os.environ.get(context.ENV_HEARTBEAT_S, "5"))
    stall_s = float(os.environ.get(progress.ENV_STALL_S, "0") or 0)
    if stall_s > 0:
        period = min(period, max(0.5, stall_s / 4))  # a stall is seen within 1.25x its threshold
    reported = threading.Event()
    threading.Thread(target=_heartbeat, args=(ctx, period, stop, reported), name="nbtrain-heartbeat",
                     daemon=True).start()
    try:
        hooks.install()
        stopping.connect()  # a warm rank: the generation's store, where a Stop is asked for
        progress.start()
        ok, result = run_bundle(Path(args[0]).resolve(), ctx)
    except BaseException as error:  # noqa: BLE001 - bundle refused or runtime broken: report and fail
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        sys.stderr.write(f"[nbtrain] rank {rank} could not run the bundle:\n{text}")
        ctx.emit(EventKind.RANK_ERROR, exc_type=type(error).__name__, message=str(error)[:2000], traceback=text[-20000:])
        reported.wait(ENV_REPORT_WAIT_S)
        _teardown(1)
        return
    stop.set()
    reported.wait(ENV_REPORT_WAIT_S)  # a short cell ends before the report (a package scan on local rank 0)
    if ok:
        has_result = _write_result(ctx, result)
        ctx.emit(EventKind.RANK_DONE, ok=True, has_result=has_result, step=ctx.last_step, **progress.report())
    _teardown(0 if ok else 1)


if __name__ == "__main__":
    main()
