"""The closure of a job cell over the notebook's earlier cells, found statically.

Starting from the cell's free names (:func:`nbtrain.bundle.analysis.analyze`, the same analysis the
live path uses), each name is looked up in the :class:`~nbtrain.export.index.CellIndex`:

- an import -> the import statement; a literal -> ``NAME = <literal>`` (written like the live path does);
- a ``def``/``class`` -> its source, whose own free names are resolved the same way (names used only
  inside function bodies may be missing, as the live path allows; names the cell binds are not needed);
- a computed value (``data = load()``) -> its statements, re-run on every rank before the cell, when
  they are *self-contained*: everything they use resolves the same way and nothing marks them unsafe
  (a ``%magic``/``!shell`` command, a loop). With ``strict=True`` computed values are refused instead.

Everything that cannot ship is reported together, each name with its cell and line:
:class:`~nbtrain.errors.UndefinedNameError` for missing names, :class:`~nbtrain.errors.CaptureError`
for computed values that cannot be re-run and for IPython-only features in the cell.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field

from nbtrain.bundle.analysis import FreeName, analyze
from nbtrain.bundle.literals import literal_source
from nbtrain.bundle.model import CaptureKind
from nbtrain.bundle.resolve import Entry
from nbtrain.errors import CaptureError, UndefinedNameError

from .index import Binding, CellIndex, Kind
from .notebook import NotebookCell

__all__ = ["StaticClosure", "resolve_static"]

_IPYTHON_ONLY = ("get_ipython", "display")


@dataclass
class StaticClosure:
    """Captured names in discovery order; ``groups`` maps a SOURCE name to its statement group
    (names sharing one group are written once); ``computed`` lists the re-run values for the report."""

    entries: dict[str, Entry] = field(default_factory=dict)
    groups: dict[str, str] = field(default_factory=dict)
    computed: list[Binding] = field(default_factory=list)

    def of_kind(self, kind: CaptureKind) -> list[Entry]:
        """Entries of one kind, in discovery order."""
        return [e for e in self.entries.values() if e.kind is kind]


@dataclass(frozen=True)
class _Use:
    use: FreeName
    owner: str | None  # None: the job cell itself; else the captured name whose text uses it
    line_offset: int = 0


def resolve_static(
    free: dict[str, FreeName],
    index: CellIndex,
    job: NotebookCell,
    *,
    cell_bound: frozenset[str],
    line_offset: int,
    max_literal_chars: int = 10_000,
    strict: bool = False,
) -> StaticClosure:
    """Resolve the job cell's ``free`` names against ``index`` (see the module doc for the rules)."""
    return _Resolver(index, job, cell_bound, max_literal_chars, strict).run(free, line_offset)


class _Resolver:
    def __init__(
        self, index: CellIndex, job: NotebookCell, cell_bound: frozenset[str], max_chars: int, strict: bool
    ) -> None:
        self.index = index
        self.job = job
        self.cell_bound = cell_bound
        self.max_chars = max_chars
        self.strict = strict
        self.closure = StaticClosure()
        self.undefined: list[str] = []
        self.refused: list[str] = []
        self.ipython: list[str] = []
        self.stars_added = False

    def run(self, free: dict[str, FreeName], line_offset: int) -> StaticClosure:
        queue = [_Use(f, None, line_offset) for f in free.values()]
        while queue:
            queue.extend(self._one(queue.pop(0)))
        self._raise_problems()
        return self.closure

    def _where(self, item: _Use) -> str:
        lines = ", ".join(str(n + item.line_offset) for n in item.use.lines)
        word = "line" if len(item.use.lines) == 1 else "lines"
        if item.owner is None:
            return f"{self.job.label}, {word} {lines}"
        return f"{item.owner} ({self.closure.entries[item.owner].detail.split(';')[0]})"

    def _one(self, item: _Use) -> list[_Use]:
        use = item.use
        name = use.name
        if name in self.closure.entries:
            return []
        strict_use = item.owner is None or not use.deferred
        if item.owner is not None and use.deferred and name in self.cell_bound:
            return []  # the cell binds it before anything can call this definition
        binding = self.index.bindings.get(name)
        if binding is None:
            self._missing(item, strict_use)
            return []
        return self._capture(binding, item)

    def _missing(self, item: _Use, strict_use: bool) -> None:
        name = item.use.name
        if name in _IPYTHON_ONLY:
            self.ipython.append(f"{name} ({self._where(item)})")
            return
        if hasattr(builtins, name) or item.use.soft:
            return
        if self.index.star_imports:
            if not self.stars_added:
                for star in self.index.star_imports:
                    self.closure.entries[star.text] = Entry(
                        star.text, CaptureKind.IMPORT, f"{star.text} ({star.cell.label}; may provide {name})",
                        None, star.text,
                    )
                self.stars_added = True
            return
        if not strict_use:
            return  # used only inside a function body: tolerated until called, as in the notebook
        hint = ""
        later = self.index.later.get(name)
        if later is not None:
            hint = f"; it is only defined later, in {later.label}"
        else:
            for cell, why in self.index.skipped:
                if name in cell.source:
                    hint = f"; {cell.label} mentions it but is {why}"
                    break
        self.undefined.append(f"{name} ({self._where(item)}{hint})")

    def _capture(self, binding: Binding, item: _Use) -> list[_Use]:
        name = binding.name
        where = f"{binding.cell.label}, line {binding.line}"
        if binding.kind is Kind.IMPORT:
            self.closure.entries[name] = Entry(name, CaptureKind.IMPORT, binding.text, None, binding.text)
            return []
        if binding.kind is Kind.LITERAL:
            text = literal_source(binding.value, self.max_chars)
            if text is not None:
                detail = f"{type(binding.value).__name__} {text if len(text) <= 40 else text[:37] + '...'} ({where})"
                self.closure.entries[name] = Entry(name, CaptureKind.LITERAL, detail, binding.value, text)
                return []
            # too long to inline as a value: ship its statement as written (it is a literal: self-contained)
        if binding.kind is Kind.COMPUTED or binding.kind is Kind.LITERAL:
            return self._computed(binding, item, where)
        return self._definition(binding, where)

    def _definition(self, binding: Binding, where: str) -> list[_Use]:
        name = binding.name
        tree = ast.parse(binding.text)
        analysis = analyze(tree)
        free = analysis.free_names()
        eager = tuple(n for n, f in free.items() if not f.deferred)
        lazy = tuple(n for n, f in free.items() if f.deferred)
        what = "class" if isinstance(tree.body[0], ast.ClassDef) else "function"
        entry = Entry(name, CaptureKind.SOURCE, f"{what} defined in {where}", None, binding.text, eager, lazy)
        self.closure.entries[name] = entry
        self.closure.groups[name] = f"def:{name}"
        return [_Use(f, name) for f in free.values()]

    def _computed(self, binding: Binding, item: _Use, where: str) -> list[_Use]:
        name = binding.name
        first = binding.text.strip().splitlines()[0]
        shown = first if len(first) <= 60 else first[:57] + "..."
        if binding.problem is not None or (self.strict and binding.kind is Kind.COMPUTED):
            why = binding.problem or "computed when the notebook runs (export --strict ships no computed values)"
            self.refused.append(f"{name}: {where}: `{shown}` — {why}")
            return []
        tree = ast.parse(binding.text)
        free = analyze(tree).free_names()
        detail = f"computed in {where}: `{shown}`; re-run on every rank"
        entry = Entry(name, CaptureKind.SOURCE, detail, None, binding.text, tuple(free), ())
        self.closure.entries[name] = entry
        self.closure.groups[name] = binding.group or f"{binding.cell.position}:{binding.line}"
        self.closure.computed.append(binding)
        # what the statements use must exist when they run: a missing name there is an error
        return [_Use(FreeName(f.name, f.lines, False, f.soft), name) for f in free.values()]

    def _raise_problems(self) -> None:
        parts: list[str] = []
        if self.ipython:
            parts.append(
                "uses IPython features that workers (plain Python) lack: " + "; ".join(self.ipython)
                + ". Move %magic/!shell lines and display() out of the job cell"
            )
        if self.refused:
            parts.append(
                "needs values that only exist once the notebook has run, and cannot re-run them on the workers: "
                + "; ".join(self.refused)
                + ". Compute them inside the job cell (or in a function it calls), or write them as literals"
            )
        if self.undefined:
            message = (
                "name(s) not defined in any cell before the job cell: " + "; ".join(self.undefined)
                + ". Define them in an earlier cell (export reads the notebook top to bottom)"
            )
            if parts:
                message += ". Also: " + ". ".join(parts)
            raise UndefinedNameError(f"cannot export {self.job.label}: {message}.")
        if parts:
            raise CaptureError(f"cannot export {self.job.label}: " + ". ".join(parts) + ".")
