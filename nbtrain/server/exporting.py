"""``POST /nbtrain/export``: the body checked field by field, and both paths kept inside the server root.

A path is inside the root when its *resolved* form (``..`` collapsed, symbolic links followed) is the root or
below it: ``Path.resolve().is_relative_to(root)``, never a string prefix (``/srv/root-evil`` starts with
``/srv/root``). ``out`` must be relative; it may not be the root itself nor a directory holding the notebook
(an earlier job directory at ``out`` is replaced as a whole).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from nbtrain.server.base import BadRequest, NotFound

__all__ = ["ExportRequest", "export_request", "run_export"]

_EXAMPLE = '{"path": "train.ipynb"} (optional: "out", "cell" or "tag")'
_FIELDS = {
    "path": "the notebook's path relative to the server root, e.g. \"train.ipynb\"",
    "out": "the job directory's path relative to the server root (default: <notebook>-job beside the notebook)",
    "cell": "the cell to export: its index (a whole number from 0) or its id (a string)",
    "tag": "a cell tag naming the cell to export",
}
_MAX_TEXT = 4096
_MAX_CELL = 10**6


@dataclass(frozen=True)
class ExportRequest:
    """A checked export body."""

    path: str
    out: str | None = None
    cell: int | str | None = None
    tag: str | None = None


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _text(body: dict[str, Any], name: str, *, required: bool = False) -> str | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > _MAX_TEXT or "\0" in value:
        got = _kind(value) if not isinstance(value, str) else (
            "an empty string" if not value.strip() else "a string with a NUL character" if "\0" in value
            else f"a string of {len(value)} characters")
        raise BadRequest(f'export: "{name}" must be {_FIELDS[name]} (a non-empty string of at most {_MAX_TEXT} '
                         f"characters); got {got}.")
    return value


def export_request(raw: bytes) -> ExportRequest:
    """The body of an export request, checked; :class:`BadRequest` naming the field and what it expects."""
    try:
        body = json.loads(raw or b"{}")
    except (ValueError, RecursionError):
        raise BadRequest(f"export: the body is not JSON; send an object like {_EXAMPLE}.") from None
    if not isinstance(body, dict):
        raise BadRequest(f"export: the body must be a JSON object like {_EXAMPLE}; got {_kind(body)}.")
    unknown = sorted(str(k)[:40] for k in body if k not in _FIELDS)
    if unknown:
        raise BadRequest(f"export: unknown field(s) {', '.join(map(repr, unknown))}; the fields are "
                         f"{', '.join(_FIELDS)}.")
    path = _text(body, "path", required=True)
    assert path is not None
    out = _text(body, "out")
    tag = _text(body, "tag")
    cell = body.get("cell")
    if cell is not None:
        if isinstance(cell, str):
            cell = _text(body, "cell")
        elif isinstance(cell, bool) or not isinstance(cell, int) or not 0 <= cell <= _MAX_CELL:
            raise BadRequest(f'export: "cell" must be {_FIELDS["cell"]} (at most {_MAX_CELL}); got '
                             f"{_kind(cell) if not isinstance(cell, int) or isinstance(cell, bool) else cell}.")
    if PurePath(path).is_absolute():
        raise BadRequest(f'export: "path" must be relative to the server root; got the absolute path {path[:200]!r}.')
    if out is not None and PurePath(out).is_absolute():
        raise BadRequest(f'export: "out" must be relative to the server root; got the absolute path {out[:200]!r}.')
    return ExportRequest(path=path, out=out, cell=cell, tag=tag)


def _inside(root: Path, relative: str, name: str) -> Path:
    """``root / relative`` resolved; BadRequest when it leaves ``root``."""
    try:
        resolved = (root / relative).resolve()
    except (OSError, RuntimeError, ValueError) as error:  # a symlink loop, an unusable name
        raise BadRequest(f'export: "{name}" {relative[:200]!r} cannot be resolved ({type(error).__name__}).') from None
    if not resolved.is_relative_to(root):
        raise BadRequest(f'export: "{name}" {relative[:200]!r} is outside the server\'s root directory; give a path '
                         "inside it (no absolute paths, no '..' out of it, no links that lead out of it).")
    return resolved


def run_export(root_dir: str, request: ExportRequest) -> dict[str, Any]:
    """Export ``request.path`` under ``root_dir`` to its job directory; ``{"path": relative dir, "files": [...],
    "cell": the cell exported ("cell 5 (id …)"), "notes": [what the user should know, e.g. which of several]}``."""
    from nbtrain.export import export_notebook
    from nbtrain.export.static import default_job_dir

    root = Path(root_dir).resolve()
    notebook = _inside(root, request.path, "path")
    if not notebook.is_file():
        raise NotFound(f'export: "path" {request.path[:200]!r}: no notebook file there under the server root.')
    if request.out is not None:
        out = _inside(root, request.out, "out")
    else:
        out = default_job_dir(notebook).resolve()
        if not out.is_relative_to(root):  # pragma: no cover - beside a notebook inside the root
            raise BadRequest(f'export: the default job directory of {request.path[:200]!r} is outside the root.')
    if out == root or notebook.is_relative_to(out):
        raise BadRequest(f'export: "out" {request.out!r} would replace the server root or the notebook\'s own '
                         "directory; name a new directory, e.g. \"train-job\".")
    kwargs: dict[str, Any] = {}
    if request.cell is not None:
        kwargs["cell"] = request.cell
    if request.tag is not None:
        kwargs["tag"] = request.tag
    job = export_notebook(notebook, out, **kwargs)
    directory = Path(getattr(job, "directory", out)).resolve()
    shown = directory.relative_to(root) if directory.is_relative_to(root) else directory
    return {"path": str(shown), "files": sorted(p.name for p in directory.iterdir()), "cell": job.cell,
            "notes": list(job.job.notes)}
