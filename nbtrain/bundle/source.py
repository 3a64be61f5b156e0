"""Find the source code of functions and classes defined in the notebook.

Lookup order, for a function ``f`` (unwrapped through ``__wrapped__``) or a class ``C``:

1. The cell that defined it, through :mod:`linecache` (IPython registers every cell there under the
   code object's file name): the top-level ``def f`` starting at ``f.__code__.co_firstlineno``, or the
   ``class C`` that contains the first line of one of ``C``'s methods. This finds the definition that
   produced *this* object even when the name was redefined later.
2. :func:`inspect.getsource` (plain ``.py`` files, e.g. code run with ``%run``).
3. The *last* top-level definition of that name in the notebook history (IPython's ``In``). Classes on
   Python 3.11 often land here (``inspect`` cannot locate ``__main__`` classes), as do classes
   without methods.

The text returned is dedented, includes decorators, and parses to exactly one definition of that name.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
import types
from collections.abc import Iterator, Sequence
from typing import Any

from .cellbody import split_lines

__all__ = ["SourceFinder", "definition_span"]

_DefNode = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def definition_span(node: _DefNode) -> tuple[int, int]:
    """1-based (first, last) lines of a definition, decorators included."""
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    assert node.end_lineno is not None
    return first, node.end_lineno


def _top_level_definitions(tree: ast.Module) -> Iterator[_DefNode]:
    """Definitions executed at module level (also inside module-level if/try/with/for blocks)."""
    stack: list[ast.stmt] = list(reversed(tree.body))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node
            continue
        children: list[ast.stmt] = []
        for attr in ("body", "orelse", "finalbody"):
            children.extend(getattr(node, attr, []) or [])
        for handler in getattr(node, "handlers", []) or []:
            children.extend(handler.body)
        for case in getattr(node, "cases", []) or []:
            children.extend(case.body)
        stack.extend(reversed(children))


def _segment(lines: list[str], node: _DefNode) -> str:
    first, last = definition_span(node)
    return textwrap.dedent("".join(lines[first - 1 : last]))


def _checked(text: str, name: str, want_class: bool) -> str | None:
    """``text`` if it parses to exactly one top-level definition called ``name`` of the right kind."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    if len(tree.body) != 1:
        return None
    node = tree.body[0]
    if want_class:
        if not isinstance(node, ast.ClassDef):
            return None
    elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    if node.name != name:
        return None
    return text.rstrip() + "\n"


class SourceFinder:
    """Finds definition sources; caches parsed cells and the history index for one capture."""

    def __init__(self, history: Sequence[str]) -> None:
        self._history = history
        self._history_index: dict[str, tuple[str, bool]] | None = None
        self._parsed: dict[str, tuple[list[str], ast.Module] | None] = {}

    # ------------------------------------------------------------------ public

    def function_source(self, fn: types.FunctionType) -> str | None:
        """Source of a top-level function (decorators included), or None."""
        name = fn.__name__
        code = fn.__code__
        parsed = self._parse_file(code.co_filename)
        if parsed is not None:
            lines, tree = parsed
            for node in _top_level_definitions(tree):
                if (
                    isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and node.name == name
                    and code.co_firstlineno in (definition_span(node)[0], node.lineno)
                ):
                    found = _checked(_segment(lines, node), name, want_class=False)
                    if found is not None:
                        return found
        text = _inspect_source(fn)
        if text is not None and (found := _checked(text, name, want_class=False)) is not None:
            return found
        return self._from_history(name, want_class=False)

    def class_source(self, cls: type) -> str | None:
        """Source of a top-level class (decorators included), or None."""
        name = cls.__name__
        for code in _method_codes(cls):
            parsed = self._parse_file(code.co_filename)
            if parsed is None:
                continue
            lines, tree = parsed
            for node in _top_level_definitions(tree):
                if isinstance(node, ast.ClassDef) and node.name == name:
                    first, last = definition_span(node)
                    if first <= code.co_firstlineno <= last:
                        found = _checked(_segment(lines, node), name, want_class=True)
                        if found is not None:
                            return found
        text = _inspect_source(cls)
        if text is not None and (found := _checked(text, name, want_class=True)) is not None:
            return found
        return self._from_history(name, want_class=True)

    # ------------------------------------------------------------------ helpers

    def _parse_file(self, filename: str) -> tuple[list[str], ast.Module] | None:
        if filename in self._parsed:
            return self._parsed[filename]
        result: tuple[list[str], ast.Module] | None = None
        if filename and filename != "<string>":
            lines = linecache.getlines(filename)
            if lines:
                try:
                    result = (lines, ast.parse("".join(lines)))
                except (SyntaxError, ValueError):
                    result = None
        self._parsed[filename] = result
        return result

    def _from_history(self, name: str, want_class: bool) -> str | None:
        if self._history_index is None:
            self._history_index = {}
            for cell in self._history:
                if not isinstance(cell, str) or not cell.strip():
                    continue
                try:
                    tree = ast.parse(cell)
                except (SyntaxError, ValueError):
                    continue
                lines = split_lines(cell)
                for node in _top_level_definitions(tree):
                    text = _segment(lines, node)
                    self._history_index[node.name] = (text, isinstance(node, ast.ClassDef))
        entry = self._history_index.get(name)
        if entry is None or entry[1] != want_class:
            return None
        return _checked(entry[0], name, want_class)


def _inspect_source(obj: Any) -> str | None:
    try:
        return textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError, IndexError, SyntaxError):
        return None


def _method_codes(cls: type) -> Iterator[types.CodeType]:
    """Code objects of functions written in the class body (properties, static/class methods too)."""
    for value in vars(cls).values():
        candidates: list[Any] = [value]
        if isinstance(value, (staticmethod, classmethod)):
            candidates = [value.__func__]
        elif isinstance(value, property):
            candidates = [value.fget, value.fset, value.fdel]
        for candidate in candidates:
            fn = inspect.unwrap(candidate) if callable(candidate) else candidate
            code = getattr(fn, "__code__", None)
            if isinstance(code, types.CodeType) and fn.__qualname__.startswith(cls.__qualname__ + "."):
                yield code
