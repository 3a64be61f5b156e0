"""Notebook -> job directory, and back: what a person tried in a notebook, as a job CI can run.

From a notebook file (no kernel; nothing in the notebook is executed)::

    result = export_notebook("train.ipynb", "train-job", cell=None, tag=None)
    print(result.summary())

From a running kernel: ``%nbtrain export [--out DIR] [--cell N|last]`` (:mod:`nbtrain.export.live`).
From nbconvert / JupyterLab's export menu: ``jupyter nbconvert --to nbtrain train.ipynb``
(:class:`nbtrain.export.exporter.NbtrainExporter`). Reading a job directory back, for
``nbtrain submit``: :func:`load_job`.

Importing this package is cheap: the modules load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .jobdir import Job, JobFiles, load_job
    from .static import ExportResult, default_job_dir, export_notebook

__all__ = ["ExportResult", "Job", "JobFiles", "default_job_dir", "export_notebook", "load_job"]

_LAZY = {
    "ExportResult": ".static",
    "default_job_dir": ".static",
    "export_notebook": ".static",
    "Job": ".jobdir",
    "JobFiles": ".jobdir",
    "load_job": ".jobdir",
}


def __getattr__(name: str) -> Any:
    """Load the export machinery on first use (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nbtrain.export' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
