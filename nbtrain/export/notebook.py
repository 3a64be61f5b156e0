"""A notebook file as the exporter sees it: code cells, their IPython syntax turned into Python, the job cell.

Nothing here runs notebook code. IPython is used for one pure thing, its input transformer (the same
code the kernel uses to turn ``%magic``/``!shell`` lines into Python calls), so that a cell's Python
is parsed exactly as the kernel would run it; no shell or kernel is created.

Cell numbers in messages are 1-based positions among *all* cells of the notebook (markdown included),
as a reader counts them, followed by the cell id when the notebook has ids: ``cell 5 (id 8fcaf022)``.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbtrain.errors import CaptureError, SpecError
from nbtrain.spec import JobSpec

__all__ = [
    "DISTRIBUTED",
    "NotebookCell",
    "choose_cell",
    "job_spec_from_header",
    "read_notebook",
    "to_python",
]

#: The cell magic that marks a job cell.
DISTRIBUTED = "%%distributed"


@dataclass(frozen=True)
class NotebookCell:
    """One code cell: its 1-based ``position`` among all cells, nbformat ``cell_id``, source and tags."""

    position: int
    cell_id: str | None
    source: str
    tags: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """``cell 5 (id 8fcaf022)`` or ``cell 5``."""
        return f"cell {self.position}" + (f" (id {self.cell_id})" if self.cell_id else "")

    @property
    def first_line(self) -> str:
        """The first line, stripped (where a cell magic sits)."""
        return self.source.lstrip("\n").split("\n", 1)[0].strip()

    @property
    def is_distributed(self) -> bool:
        """True when the cell starts with ``%%distributed``."""
        first = self.first_line
        return first == DISTRIBUTED or first.startswith(DISTRIBUTED + " ")

    @property
    def cell_magic(self) -> str | None:
        """The name of the cell magic that owns the whole cell (``time`` for ``%%time``), else None."""
        first = self.first_line
        return first[2:].split(None, 1)[0] if first.startswith("%%") and len(first) > 2 else None

    def split_header(self) -> tuple[str, str, int]:
        """``(magic arguments, body, line offset)``: for a ``%%distributed`` cell, the flags after the
        magic and the body below it (offset 1 + leading blank lines); for any other cell ``("", source, 0)``."""
        if not self.is_distributed:
            return "", self.source, 0
        lines = self.source.split("\n")
        skipped = 0
        while lines and not lines[0].strip():
            lines.pop(0)
            skipped += 1
        args = lines[0].strip()[len(DISTRIBUTED) :].strip()
        return args, "\n".join(lines[1:]), skipped + 1


def read_notebook(path: Path) -> tuple[list[NotebookCell], Any]:
    """Read ``path`` with nbformat; return its code cells and the notebook node.

    Raises :class:`CaptureError` naming the file when it is missing or not a notebook.
    """
    import nbformat

    path = Path(path)
    if not path.is_file():
        what = "a directory" if path.is_dir() else "missing"
        raise CaptureError(f"cannot export {str(path)!r}: it is {what}; give the path of an .ipynb file.")
    try:
        node = nbformat.read(str(path), as_version=4)
    except Exception as error:  # noqa: BLE001 - nbformat raises JSON, validation and OS errors alike
        raise CaptureError(f"cannot export {str(path)!r}: it is not a readable Jupyter notebook ({error}).") from None
    return cells_of(node), node


def cells_of(node: Any) -> list[NotebookCell]:
    """The code cells of a notebook node (as returned by nbformat), in order."""
    cells = []
    for position, cell in enumerate(node.get("cells", []), 1):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(source)
        tags = tuple(str(t) for t in (cell.get("metadata", {}) or {}).get("tags", []) or [])
        cells.append(NotebookCell(position, cell.get("id"), str(source), tags))
    return cells


@functools.cache
def _transformer() -> Any:
    from IPython.core.inputtransformer2 import TransformerManager  # pure text transform, no shell

    return TransformerManager()


def to_python(source: str) -> str:
    """The Python the kernel would run for ``source`` (``%x`` -> ``get_ipython().run_line_magic(...)``).

    Line magics and shell escapes keep their line, so line numbers stay the cell's own.
    """
    return str(_transformer().transform_cell(source))


def choose_cell(
    cells: Sequence[NotebookCell], *, cell: str | int | None = None, tag: str | None = None
) -> tuple[int, str]:
    """Pick the job cell; return ``(index into cells, a note for the user or "")``.

    - ``cell``: a cell id, or a 1-based position among all cells (``5``); it must be a code cell.
    - ``tag``: the one code cell tagged ``tag`` (refused when several are).
    - neither: the last ``%%distributed`` cell (the note lists the others when there are several).

    Raises :class:`CaptureError` naming what exists when nothing matches.
    """
    if cell is not None and tag is not None:
        raise CaptureError("choose the job cell with --cell or --tag, not both.")
    jobs = [i for i, c in enumerate(cells) if c.is_distributed]
    listing = ", ".join(cells[i].label for i in jobs) or "none"
    if cell is not None:
        wanted = str(cell).strip()
        for i, c in enumerate(cells):
            if c.cell_id == wanted or (wanted.isdigit() and c.position == int(wanted)):
                return i, ""
        raise CaptureError(
            f"--cell {cell!r}: no code cell has that id or position. %%distributed cells: {listing}."
        )
    if tag is not None:
        tagged = [i for i, c in enumerate(cells) if tag in c.tags]
        if not tagged:
            raise CaptureError(f"--tag {tag!r}: no code cell carries that tag. %%distributed cells: {listing}.")
        if len(tagged) > 1:
            names = ", ".join(cells[i].label for i in tagged)
            raise CaptureError(f"--tag {tag!r}: {len(tagged)} cells carry it ({names}); pick one with --cell.")
        return tagged[0], ""
    if not jobs:
        raise CaptureError(
            "the notebook has no %%distributed cell; start the training cell with %%distributed, "
            "or tag it and pass --tag TAG."
        )
    note = ""
    if len(jobs) > 1:
        note = f"{len(jobs)} %%distributed cells ({listing}): exported the last; choose another with --cell."
    return jobs[-1], note


def job_spec_from_header(args: str, where: str) -> JobSpec:
    """The JobSpec of ``%%distributed ARGS`` exactly as the magic would build it.

    Notebook-only flags (``--out``, ``--block``, ``--dry-run``...) are accepted and have no effect.
    Raises :class:`SpecError` naming ``where`` (e.g. "cell 5") and the flag.
    """
    return job_of_header(args, where)[0]


def job_of_header(args: str, where: str) -> tuple[JobSpec, str | None]:
    """:func:`job_spec_from_header` and the profile the line names (``"NAME VERSION"``, None without ``--profile``)."""
    import shlex

    from nbtrain import flags

    parser = flags.build_parser("magic", prog="%%distributed", exit_on_error=False)
    try:
        parsed = parser.parse_args(shlex.split(args))
        from nbtrain.profiles.apply import resolve_args  # --profile NAME: its values are exported with the spec

        resolved = resolve_args(parsed)
        return resolved.spec, resolved.profile.label if resolved.profile is not None else None
    except (argparse.ArgumentError, SpecError, ValueError) as error:
        raise SpecError(f"{where}: %%distributed {args}: {error}") from None
    except SystemExit as error:  # argparse on an unknown flag
        raise SpecError(f"{where}: %%distributed {args}: bad flags ({error}).") from None
