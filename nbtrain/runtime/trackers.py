"""nbtrain's stand-in for Accelerate's MLflow tracker on the ranks (stdlib; Accelerate imported only when in use).

``Accelerator(log_with="mlflow")`` (or ``"all"``) gets :class:`RunTracker` in place of Accelerate's
``MLflowTracker``: ``accelerator.get_tracker("mlflow")`` then logs into nbtrain's MLflow run, which the tracking
agent writes from beside the run (ranks may not reach the tracking server, and a second MLflow run from rank 0
would split the record). What each call becomes:

=========================================  ========================================================================
``log(values, step)``                      nbtrain metrics (monitor, ``run.metrics()``, MLflow) — once: inside
                                           ``accelerator.log`` the Accelerator hook has recorded them already
``store_init_configuration(config)``       the run's params (once: ``init_trackers`` records its config already)
``log_artifact(path, artifact_path)``      the file, copied beside the run's events, uploaded to the MLflow run
``log_artifacts(dir, artifact_path)``      every file of ``dir``, under ``artifact_path``
``log_figure(figure, artifact_file)``      the figure saved (matplotlib ``savefig``, plotly ``write_html`` /
                                           ``write_image``) to ``artifact_file``, then as ``log_artifact``
``tracker`` (``get_tracker(unwrap=True)``)  this object: there is no MLflow run object on the ranks
=========================================  ========================================================================

Files travel as :data:`~nbtrain.events.EventKind.ARTIFACT` events: with an events directory (local, Slurm) the
file is copied to ``<attempt>/artifacts/`` and the event names it; where events go through stdout (Kubernetes)
files up to :data:`MAX_INLINE_BYTES` travel inside the event, larger ones are refused with a notice.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import os
import shutil
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from nbtrain.events import EventKind
from nbtrain.runtime import context

__all__ = ["MAX_INLINE_BYTES", "inside", "log_artifact", "make_tracker", "quiet"]

MAX_INLINE_BYTES = 1 << 20  # an artifact sent inside a stdout event (no shared disk): at most 1 MiB
_local = threading.local()
_counter = itertools.count()


@contextlib.contextmanager
def quiet(what: str) -> Iterator[None]:
    """Within this block the tracker's ``what`` ("log", "config") was recorded by a hook already: it skips it."""
    previous = getattr(_local, what, False)
    setattr(_local, what, True)
    try:
        yield
    finally:
        setattr(_local, what, previous)


def inside(what: str) -> bool:
    """True while :func:`quiet` (``what``) is active on this thread."""
    return bool(getattr(_local, what, False))


def _safe_part(text: str) -> str:
    parts = [p for p in Path(text).as_posix().split("/") if p not in ("", ".", "..")]
    return "/".join(parts)


def log_artifact(local: Path, artifact_path: str | None = None) -> bool:
    """Ship the file ``local`` to the run's MLflow artifacts under ``artifact_path``; False (with a notice) if not.

    Outside a run this does nothing. The file is copied at once, so the caller may delete or rewrite it after.
    """
    ctx = context.current()
    if ctx is None:
        return False
    local = Path(local)
    target = _safe_part(artifact_path or "")
    size = local.stat().st_size
    data: dict[str, Any] = {"artifact_path": target, "name": local.name, "bytes": size}
    events_dir = os.environ.get(context.ENV_EVENTS_DIR)
    if events_dir:
        slot = Path(events_dir).parent / "artifacts" / f"r{ctx.rank}-{os.getpid()}-{next(_counter)}"
        slot.mkdir(parents=True, exist_ok=True)
        copy = slot / local.name
        shutil.copyfile(local, copy)
        data["path"] = str(copy)
    elif size <= MAX_INLINE_BYTES:
        data["data_b64"] = base64.b64encode(local.read_bytes()).decode("ascii")
    else:
        ctx.emit(EventKind.NOTICE, message=f"artifact {local} ({size} bytes) not logged: without shared storage "
                 f"(events through stdout) files up to {MAX_INLINE_BYTES} bytes are sent; save larger ones to "
                 "--checkpoint-dir or object storage")
        return False
    ctx.emit(EventKind.ARTIFACT, **data)
    return True


def _save_figure(figure: Any, path: Path, save_kwargs: Mapping[str, Any]) -> None:
    if hasattr(figure, "savefig"):  # matplotlib
        figure.savefig(path, **save_kwargs)
    elif path.suffix == ".html" and hasattr(figure, "write_html"):  # plotly
        figure.write_html(str(path), **save_kwargs)
    elif hasattr(figure, "write_image"):
        figure.write_image(str(path), **save_kwargs)
    else:
        raise TypeError(f"log_figure: a {type(figure).__name__} is neither a matplotlib nor a plotly figure; save it "
                        "to a file and call log_artifact(path) instead")


def make_tracker() -> Any:
    """A new :class:`RunTracker` (an ``accelerate.tracking.GeneralTracker``; the class is built on first use)."""
    return _tracker_class()()


_class: Any = None


def _tracker_class() -> Any:
    global _class
    if _class is not None:
        return _class
    import tempfile

    from accelerate.tracking import GeneralTracker

    from nbtrain.runtime import metrics
    from nbtrain.runtime.params import flatten_params

    class RunTracker(GeneralTracker):
        """``accelerator.get_tracker("mlflow")`` inside an nbtrain run (see the module docstring)."""

        name = "mlflow"
        requires_logging_directory = False
        main_process_only = True

        def __init__(self) -> None:
            super().__init__()

        @property
        def tracker(self) -> Any:
            return self

        def store_init_configuration(self, values: dict[str, Any]) -> None:
            ctx = context.current()
            if ctx is not None and not inside("config") and values:
                ctx.emit(EventKind.PARAMS, project="get_tracker('mlflow')", values=flatten_params(values))

        def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
            if not inside("log"):
                metrics.record(values, step)

        def log_artifact(self, local_path: str, artifact_path: str | None = None) -> None:
            log_artifact(Path(local_path), artifact_path)

        def log_artifacts(self, local_dir: str, artifact_path: str | None = None) -> None:
            root = Path(local_dir)
            for path in sorted(p for p in root.rglob("*") if p.is_file()):
                parent = path.parent.relative_to(root).as_posix()
                log_artifact(path, "/".join(p for p in (artifact_path or "", parent) if p not in ("", ".")))

        def log_figure(self, figure: Any, artifact_file: str, **save_kwargs: Any) -> None:
            where = Path(_safe_part(artifact_file))
            with tempfile.TemporaryDirectory(prefix="nbtrain-figure-") as tmp:
                path = Path(tmp) / where.name
                _save_figure(figure, path, save_kwargs)
                log_artifact(path, where.parent.as_posix() if where.parent.as_posix() != "." else None)

    _class = RunTracker
    return _class
