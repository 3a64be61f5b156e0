"""What each earlier cell of a notebook binds, read statically (ast only; nothing is executed).

:func:`index_cells` walks the cells before the job cell in notebook order, top-level statement by
statement, and keeps the *last* binding of each name, as "Run All" would leave it:

- ``import x`` / ``from m import n as k`` -> :attr:`Kind.IMPORT` (the statement for that one name);
- ``def`` / ``class`` (decorators included) -> :attr:`Kind.DEFINITION`;
- ``NAME = <literal>`` (anything :func:`ast.literal_eval` accepts) -> :attr:`Kind.LITERAL`;
- any other binding (``data = load()``, ``a, b = f()``, names bound inside a top-level ``if``/``try``/
  ``with``/``for`` block) -> :attr:`Kind.COMPUTED`, keeping the statements that produce it. Later
  top-level mutations of a notebook value (``cfg["lr"] = 1``, ``x += 1``, ``items.append(3)``) turn its
  binding into COMPUTED and join it. Modules are not tracked for mutations (``torch.manual_seed(0)``).

A COMPUTED binding carries a ``problem`` when re-running its statements on a worker is not sensible:
set by a magic or shell command (``x = !ls``), assigned in a loop, a relative import.
Cells owned by a cell magic (``%%time``, ``%%bash``) and cells that do not parse are skipped and
remembered, so a name missing because of them can be explained.
"""

from __future__ import annotations

import ast
import enum
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .notebook import NotebookCell, to_python

__all__ = ["Binding", "CellIndex", "Kind", "index_cells", "names_bound_by"]


class Kind(str, enum.Enum):
    """How a name came to exist in the notebook."""

    IMPORT = "import"
    DEFINITION = "definition"
    LITERAL = "literal"
    COMPUTED = "computed"


@dataclass
class Binding:
    """The last binding of ``name`` before the job cell.

    ``text`` is the import statement / definition source / statement source(s) in notebook order;
    ``value`` the literal's value (LITERAL only); ``group`` identifies statements shared by several
    names (``a, b = f()``), so they are written once; ``line`` is the cell's own 1-based line.
    """

    name: str
    kind: Kind
    cell: NotebookCell
    line: int
    text: str
    value: Any = None
    group: str = ""
    problem: str | None = None


@dataclass
class CellIndex:
    """Bindings before the job cell, plus what the index could not read."""

    bindings: dict[str, Binding] = field(default_factory=dict)
    star_imports: list[Binding] = field(default_factory=list)
    skipped: list[tuple[NotebookCell, str]] = field(default_factory=list)  # (cell, why)
    later: dict[str, NotebookCell] = field(default_factory=dict)  # names first bound after the job cell


def index_cells(before: Sequence[NotebookCell], after: Sequence[NotebookCell] = ()) -> CellIndex:
    """Index the cells ``before`` the job cell; ``after`` only feeds "defined later" hints."""
    index = CellIndex()
    for cell in before:
        tree, lines, why = _parse(cell)
        if tree is None:
            index.skipped.append((cell, why))
            continue
        for stmt in tree.body:
            _statement(index, cell, stmt, lines)
    for cell in after:
        tree, _, _ = _parse(cell)
        if tree is None:
            continue
        for name in sorted(names_bound_by(tree.body)):
            index.later.setdefault(name, cell)
    return index


def _parse(cell: NotebookCell) -> tuple[ast.Module | None, list[str], str]:
    magic = cell.cell_magic
    if magic is not None:
        return None, [], f"a %%{magic} cell (export does not look inside cell magics)"
    try:
        source = to_python(cell.source)
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as error:
        return None, [], f"does not parse ({error})"
    return tree, source.splitlines(keepends=True), ""


def _segment(lines: list[str], node: ast.stmt, first: int | None = None) -> str:
    start = first if first is not None else node.lineno
    assert node.end_lineno is not None
    return "".join(lines[start - 1 : node.end_lineno]).rstrip() + "\n"


def _statement(index: CellIndex, cell: NotebookCell, stmt: ast.stmt, lines: list[str]) -> None:
    found = index.bindings
    group = f"{cell.position}:{stmt.lineno}"
    if isinstance(stmt, ast.Import):
        for alias in stmt.names:
            name = alias.asname or alias.name.partition(".")[0]
            text = f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
            found[name] = Binding(name, Kind.IMPORT, cell, stmt.lineno, text)
        return
    if isinstance(stmt, ast.ImportFrom):
        for alias in stmt.names:
            text = f"from {'.' * stmt.level}{stmt.module or ''} import {alias.name}" + (
                f" as {alias.asname}" if alias.asname else ""
            )
            if alias.name == "*":
                index.star_imports.append(Binding("*", Kind.IMPORT, cell, stmt.lineno, text))
                continue
            name = alias.asname or alias.name
            problem = "a relative import, which only works next to the notebook's package" if stmt.level else None
            kind = Kind.COMPUTED if stmt.level else Kind.IMPORT
            found[name] = Binding(name, kind, cell, stmt.lineno, text, group=group, problem=problem)
        return
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        first = min([stmt.lineno, *(d.lineno for d in stmt.decorator_list)])
        found[stmt.name] = Binding(stmt.name, Kind.DEFINITION, cell, first, _segment(lines, stmt, first))
        return
    if _uses_ipython(stmt):
        for name in names_bound_by([stmt]):
            found[name] = Binding(
                name, Kind.COMPUTED, cell, stmt.lineno, _segment(lines, stmt), group=group,
                problem="set by a %magic or !shell command, which workers (plain Python) cannot run",
            )
        return
    literal = _literal_assignment(stmt)
    if literal is not None:
        name, value = literal
        found[name] = Binding(name, Kind.LITERAL, cell, stmt.lineno, _segment(lines, stmt), value=value)
        return
    if isinstance(stmt, ast.Delete):
        for target in stmt.targets:
            if isinstance(target, ast.Name):
                found.pop(target.id, None)
            else:
                _mutate(found, _root_name(target), cell, stmt, lines)
        return
    if isinstance(stmt, ast.AugAssign):  # x += 1 changes x: join it to x's binding
        _mutate(found, _root_name(stmt.target), cell, stmt, lines, force=True)
        return
    text = _segment(lines, stmt)
    problem = "assigned or changed inside a top-level loop" if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)) else None
    bound = names_bound_by([stmt])
    read = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    for name in sorted(bound):
        if name in read and name in found:  # model = model.to(device): needs the previous value too
            _mutate(found, name, cell, stmt, lines, force=True, problem=problem)
        else:
            found[name] = Binding(name, Kind.COMPUTED, cell, stmt.lineno, text, group=group, problem=problem)
    for name in _mutated_names(stmt) - bound:
        _mutate(found, name, cell, stmt, lines, problem=problem)


def _mutate(
    found: dict[str, Binding], name: str | None, cell: NotebookCell, stmt: ast.stmt, lines: list[str],
    *, force: bool = False, problem: str | None = None,
) -> None:
    """Join ``stmt`` to the binding of ``name`` (a ``problem`` of the statement, e.g. a loop, sticks).

    Modules are left alone unless ``force`` (the statement rebinds the name from its old value):
    ``np.random.seed(0)`` is not tracked.
    """
    if name is None or name not in found:
        return
    old = found[name]
    if old.kind is Kind.IMPORT and not force:
        return
    found[name] = Binding(
        name, Kind.COMPUTED, old.cell, old.line, old.text.rstrip("\n") + "\n" + _segment(lines, stmt),
        group=f"{old.group or f'{old.cell.position}:{old.line}'}+{cell.position}:{stmt.lineno}",
        problem=old.problem or problem,
    )


def _literal_assignment(stmt: ast.stmt) -> tuple[str, Any] | None:
    """``(name, value)`` for ``NAME = <literal>`` / ``NAME: T = <literal>``, else None."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        target, value = stmt.targets[0].id, stmt.value
    elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        target, value = stmt.target.id, stmt.value
    else:
        return None
    try:
        return target, ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _uses_ipython(stmt: ast.stmt) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "get_ipython" for n in ast.walk(stmt))


def _own_nodes(nodes: Iterable[ast.AST]) -> Iterator[ast.AST]:
    """Nodes of module scope: nested function/class/lambda bodies and comprehensions are skipped."""
    stack = list(nodes)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue  # (a walrus inside one would bind here; too rare to matter for export)
        stack.extend(ast.iter_child_nodes(node))


def names_bound_by(stmts: Iterable[ast.stmt]) -> set[str]:
    """Names the statements bind at module level (assignments, defs, imports, ``except ... as``, ``with ... as``)."""
    bound: set[str] = set()
    for node in _own_nodes(stmts):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {a.asname or a.name.partition(".")[0] for a in node.names if a.name != "*"}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            bound.add(node.target.id)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            bound.add(node.name)
    return bound


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _mutated_names(stmt: ast.stmt) -> set[str]:
    """Names whose value a top-level statement (or a block's body) changes in place, without rebinding:
    ``cfg["lr"] = 1``, ``obj.attr = 2``, ``del cfg["x"]``, ``items.append(3)`` as a statement."""
    out: set[str] = set()
    for node in _own_nodes([stmt]):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute):
            root = _root_name(node.value.func.value)
            if root is not None:
                out.add(root)
        while targets:
            target = targets.pop()
            if isinstance(target, (ast.Tuple, ast.List)):
                targets.extend(target.elts)
            elif isinstance(target, ast.Starred):
                targets.append(target.value)
            elif isinstance(target, (ast.Attribute, ast.Subscript)):
                root = _root_name(target)
                if root is not None:
                    out.add(root)
    return out
