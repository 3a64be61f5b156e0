"""Export from a notebook file, without a kernel: .ipynb -> bundle -> job directory.

Steps: choose the job cell (:func:`~nbtrain.export.notebook.choose_cell`), its JobSpec from the
``%%distributed`` flags (tagged cells without that line get the defaults), free names of its body
(the live path's analysis), the closure over the earlier cells (:mod:`~nbtrain.export.resolve`), the
bundle (:mod:`~nbtrain.export.assemble`), the ``parameters`` cell as options, the job files.
No notebook code is executed at any step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbtrain.bundle.analysis import analyze
from nbtrain.bundle.cellbody import parse_source
from nbtrain.bundle.render import comment_text
from nbtrain.spec import JobSpec

from .assemble import assemble_static
from .index import Kind, index_cells
from .jobdir import JobFiles, build_job_files, write_job_dir
from .manifests import Manifests
from .notebook import cells_of, choose_cell, job_of_header, read_notebook, to_python
from .parameters import add_parameters, parameter_names

__all__ = ["ExportResult", "default_job_dir", "export_notebook", "notebook_job"]


@dataclass(frozen=True)
class ExportResult:
    """What an export produced: the files (and where they were written), the spec, the cell."""

    job: JobFiles
    spec: JobSpec
    cell: str
    directory: Path | None = None
    computed: tuple[str, ...] = ()

    def summary(self) -> str:
        """A few human lines: where, which cell, gang, parameters, computed values, notes."""
        where = f" to {self.directory}" if self.directory is not None else ""
        lines = [
            f"exported {self.cell}{where}: {self.spec.nodes} node(s) x {self.spec.procs} process(es) on "
            f"{self.spec.backend}, bundle {self.job.digest[:12]}"
        ]
        if self.job.parameters:
            lines.append("parameters: " + ", ".join(f"{p.option} ({p.kind})" for p in self.job.parameters))
        if self.computed:
            lines.append("re-run on every rank (computed in the notebook): " + "; ".join(self.computed))
        if self.job.k8s:
            lines.append("kubernetes manifests: " + ", ".join(self.job.k8s))
        elif self.job.k8s_missing:
            lines.append(f"no kubernetes manifests: {self.job.k8s_missing}")
        lines += [f"note: {n}" for n in self.job.notes]
        return "\n".join(lines)


def default_job_dir(notebook: Path) -> Path:
    """``<notebook stem>-job`` next to the notebook."""
    notebook = Path(notebook)
    return notebook.with_name(f"{notebook.stem}-job")


def notebook_job(
    node: Any,
    *,
    path: str | None = None,
    cell: str | int | None = None,
    tag: str | None = None,
    strict: bool = False,
    manifests: Manifests | None = None,
) -> ExportResult:
    """Build the job files of one cell of the notebook ``node`` (an nbformat node); nothing is written.

    ``path`` is recorded in the manifest and README. Raises :class:`~nbtrain.errors.CaptureError`
    (cell choice, closure, syntax, secrets) or :class:`~nbtrain.errors.SpecError` (bad flags).
    """
    cells = cells_of(node)
    index, note = choose_cell(cells, cell=cell, tag=tag)
    job_cell = cells[index]
    args, raw_body, offset = job_cell.split_header()
    notes = [note] if note else []
    profile: str | None = None
    if job_cell.is_distributed:
        spec, profile = job_of_header(args, job_cell.label)
    else:
        # a file name may hold a line break, which JobSpec refuses in a name: written as an escape (\n) instead
        spec = JobSpec(name=comment_text(Path(path).stem)[:100] if path else "run")
        notes.append(f"{job_cell.label} has no %%distributed line: nbtrain.toml holds the default spec (1 x 1).")
    body = to_python(raw_body)
    analysis = analyze(parse_source(body, line_offset=offset, what="cell"))
    cell_index = index_cells(cells[:index], cells[index + 1 :])

    from .resolve import resolve_static

    closure = resolve_static(
        analysis.free_names(), cell_index, job_cell, cell_bound=analysis.bound, line_offset=offset, strict=strict
    )
    info = {"path": str(path) if path else None, "cell_id": job_cell.cell_id or str(job_cell.position)}
    bundle = assemble_static(
        closure, body, line_offset=offset, notebook={k: v for k, v in info.items() if v},
        allow_secrets=spec.allow_secrets,
    )
    names = parameter_names(cells[:index])
    defaults = {
        n: b.value for n in names if (b := cell_index.bindings.get(n)) is not None and b.kind is Kind.LITERAL
    }
    bundle, parameters = add_parameters(bundle, names, defaults)
    computed = tuple(f"{b.name} (line {b.line} of {b.cell.label})" for b in closure.computed)
    origin = job_cell.label + (f" of {Path(path).name}" if path else "")
    files = build_job_files(
        bundle, spec, parameters=parameters, origin=origin, computed=computed, notes=notes, manifests=manifests,
        profile=profile,
    )
    return ExportResult(files, spec, job_cell.label, None, computed)


def export_notebook(
    notebook: Path,
    out: Path | None = None,
    *,
    cell: str | int | None = None,
    tag: str | None = None,
    strict: bool = False,
    manifests: Manifests | None = None,
) -> ExportResult:
    """Export one cell of the notebook file ``notebook`` to the job directory ``out``
    (default :func:`default_job_dir`). See :func:`notebook_job` for the errors."""
    notebook = Path(notebook)
    _, node = read_notebook(notebook)
    result = notebook_job(node, path=str(notebook), cell=cell, tag=tag, strict=strict, manifests=manifests)
    directory = write_job_dir(result.job, Path(out) if out is not None else default_job_dir(notebook))
    return ExportResult(result.job, result.spec, result.cell, directory, result.computed)

