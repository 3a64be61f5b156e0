"""Export from a running kernel: a ``%%distributed`` cell of the history, captured like the magic does.

The kernel's history (IPython's ``In``) holds each ``%%distributed`` cell as the Python IPython ran:
``get_ipython().run_cell_magic('distributed', FLAGS, BODY)``. The chosen cell's BODY is captured with
:func:`nbtrain.bundle.capture_cell` against the live namespace, exactly as ``%%distributed`` would
capture it now (so computed objects are pickled, not re-run). No IPython import here: the caller
passes the namespace, the history and its shell's ``transform_cell``.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nbtrain.errors import CaptureError

from .jobdir import build_job_files, write_job_dir
from .manifests import Manifests
from .notebook import job_of_header, read_notebook
from .parameters import add_parameters, parameter_names
from .static import ExportResult

__all__ = ["distributed_cells", "export_live"]


def distributed_cells(history: Sequence[str]) -> list[tuple[int, str, str]]:
    """``(execution count, flags, body)`` of every ``%%distributed`` cell in ``history`` (``In``)."""
    found = []
    for count, source in enumerate(history):
        if not isinstance(source, str) or "run_cell_magic" not in source:
            continue
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Expr):
            continue
        call = tree.body[0].value
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "run_cell_magic"
            and len(call.args) == 3
        ):
            try:
                name, flags, body = (ast.literal_eval(a) for a in call.args)
            except ValueError:
                continue
            if name == "distributed" and isinstance(flags, str) and isinstance(body, str):
                found.append((count, flags, body))
    return found


def export_live(
    namespace: Mapping[str, Any],
    history: Sequence[str],
    *,
    transform: Callable[[str], str],
    out: Path | None = None,
    cell: str = "last",
    params: Sequence[str] | None = None,
    notebook: Mapping[str, Any] | None = None,
    manifests: Manifests | None = None,
) -> ExportResult:
    """Export the ``%%distributed`` cell ``In[cell]`` (``"last"``: the latest one) to a job directory.

    ``params`` names the values that become options; when None they are read from the notebook file's
    ``parameters`` cell if ``notebook["path"]`` is a readable .ipynb. ``out`` defaults to
    ``<notebook stem>-job`` next to the notebook, else ``<run name>-job`` in the working directory.
    Raises :class:`CaptureError` (no such cell, capture refusals) or :class:`~nbtrain.errors.SpecError`.
    """
    from nbtrain.bundle import CaptureOptions, capture_cell

    cells = distributed_cells(history)
    if not cells:
        raise CaptureError("no %%distributed cell has run in this kernel yet; run one, then export it.")
    if cell == "last":
        count, flags, raw = cells[-1]
    else:
        if not str(cell).isdigit():
            raise CaptureError(f"--cell {cell!r}: give an execution count (the N of In[N]) or 'last'.")
        chosen = [c for c in cells if c[0] == int(cell)]
        if not chosen:
            listing = ", ".join(f"In[{c[0]}]" for c in cells)
            raise CaptureError(f"--cell {cell}: In[{cell}] is not a %%distributed cell; these are: {listing}.")
        count, flags, raw = chosen[0]
    label = f"In[{count}]"
    spec, profile = job_of_header(flags, label)
    info = {k: str(v) for k, v in dict(notebook or {}).items() if v}
    bundle = capture_cell(
        transform(raw),
        namespace,
        history=[h for h in history[:count] if isinstance(h, str)],
        options=CaptureOptions(max_pickle_bytes=int(spec.max_capture_mb * 1024 * 1024), allow_secrets=spec.allow_secrets),
        cell_line_offset=1,
        notebook=info,
    )
    names = list(params) if params is not None else _notebook_parameters(info.get("path"))
    bundle, parameters = add_parameters(bundle, names, {n: namespace[n] for n in names if n in namespace})
    unknown = [n for n in (params or []) if n not in {p.name for p in parameters}]
    notes = []
    if unknown:
        notes.append(
            f"not parameters (the cell does not use them as plain values): {', '.join(unknown)}"
        )
    origin = f"{label} of the kernel" + (f" running {Path(info['path']).name}" if info.get("path") else "")
    files = build_job_files(bundle, spec, parameters=parameters, origin=origin, notes=notes, manifests=manifests,
                            profile=profile)
    if out is None:
        path = info.get("path")
        out = Path(path).with_name(f"{Path(path).stem}-job") if path else Path(f"{spec.slug}-job")
    directory = write_job_dir(files, Path(out))
    return ExportResult(files, spec, label, directory)


def _notebook_parameters(path: str | None) -> list[str]:
    if not path or not path.endswith(".ipynb") or not Path(path).is_file():
        return []
    try:
        cells, _ = read_notebook(Path(path))
    except CaptureError:
        return []
    return parameter_names(cells)
