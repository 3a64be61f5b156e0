"""Decide how each free name travels: import, source, literal or pickle (the bundle's closure).

Starting from the free names of the cell, every name is looked up in the notebook namespace and
classified, in this order:

1. a module -> ``import x`` / ``import x.y as z``;
2. a plain value whose text fits ``max_literal_chars`` -> ``NAME = <literal>``;
3. a function or class defined in the notebook -> its source, whose own free names are resolved the
   same way (recursively); lambdas, closures, nested definitions and definitions whose source cannot
   be found are pickled by value instead, with the reason in ``detail``;
4. an object importable from a real module -> ``from pkg import name [as alias]``;
5. anything else -> pickled into objects.pkl.

Names the notebook does not define are collected and reported together. Builtins are not captured
unless the notebook shadows them. ``get_ipython``/``display`` (what IPython turns ``%magic``, ``!cmd``
and ``display(...)`` into) are refused: workers run plain Python.
"""

from __future__ import annotations

import builtins
import inspect
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nbtrain.errors import CaptureError, UndefinedNameError

from .analysis import Analysis, FreeName, analyze
from .cellbody import parse_source
from .imports import import_for_module, import_for_object
from .literals import literal_source
from .model import CaptureKind, CaptureOptions
from .source import SourceFinder

__all__ = ["Closure", "Entry", "Where", "describe_object", "resolve_closure"]

_IPYTHON_ONLY = ("get_ipython", "display")


@dataclass(frozen=True)
class Where:
    """Where a free name is used, for messages: the cell, or a notebook definition."""

    label: str  # "cell", "function train" or "function helper (defined in the notebook)"
    line_offset: int = 0  # added to analysis line numbers
    owner: str | None = None  # the captured name whose definition this is (None: the entry code)

    @property
    def strict(self) -> bool:
        """True for the code that runs (cell, function): an undefined name there is an error."""
        return self.owner is None

    def lines(self, lines: tuple[int, ...]) -> str:
        """``"cell line 3, 7"`` or ``"function f (defined in the notebook), line 2"``."""
        numbers = ", ".join(str(n + self.line_offset) for n in lines)
        word = "line" if len(lines) == 1 else "lines"
        if self.label == "cell":
            return f"cell {word} {numbers}"
        return f"{self.label}, {word} {numbers} of its definition"


@dataclass
class Entry:
    """One captured name. ``text`` is the import/literal/definition source; ``value`` the object.

    ``eager`` names must exist before this entry's text runs (decorators, bases, defaults, class
    bodies); ``lazy`` names are only needed when its functions are called.
    """

    name: str
    kind: CaptureKind
    detail: str
    value: Any = None
    text: str = ""
    eager: tuple[str, ...] = ()
    lazy: tuple[str, ...] = ()


@dataclass
class Closure:
    """Every captured name, in discovery order (the cell's names first, then their dependencies)."""

    entries: dict[str, Entry] = field(default_factory=dict)

    def of_kind(self, kind: CaptureKind) -> list[Entry]:
        """Entries of one kind, in discovery order."""
        return [e for e in self.entries.values() if e.kind is kind]


def resolve_closure(
    free: Mapping[str, FreeName],
    namespace: Mapping[str, Any],
    *,
    where: Where,
    cell_bound: frozenset[str],
    history: tuple[str, ...] | list[str] | Any,
    options: CaptureOptions,
) -> Closure:
    """Classify ``free`` (the cell's free names) and, recursively, what notebook definitions use.

    ``cell_bound`` are names the cell binds at module level: a notebook definition that reads one of
    them inside a function body gets the cell's value at run time, so it is not captured.
    Raises :class:`UndefinedNameError` (all undefined names at once) or :class:`CaptureError` (IPython
    features the workers lack).
    """
    return _Resolver(namespace, history, options, cell_bound).run(free, where)


class _Resolver:
    def __init__(
        self,
        namespace: Mapping[str, Any],
        history: Any,
        options: CaptureOptions,
        cell_bound: frozenset[str],
    ) -> None:
        self.ns = namespace
        self.options = options
        self.cell_bound = cell_bound
        self.finder = SourceFinder(tuple(history))
        self.closure = Closure()
        self.undefined: list[tuple[FreeName, Where]] = []
        self.ipython: list[tuple[FreeName, Where]] = []

    def run(self, free: Mapping[str, FreeName], where: Where) -> Closure:
        queue: list[tuple[FreeName, Where]] = [(f, where) for f in free.values()]
        while queue:
            use, use_where = queue.pop(0)
            queue.extend(self._one(use, use_where))
        self._raise_problems()
        return self.closure

    # ------------------------------------------------------------------ one name

    def _one(self, use: FreeName, where: Where) -> list[tuple[FreeName, Where]]:
        name = use.name
        if name in self.closure.entries:
            return []
        if not where.strict and use.deferred and name in self.cell_bound:
            return []  # the cell binds it before anything can call this definition
        if name in self.ns:
            value = self.ns[name]
            if name in _IPYTHON_ONLY and not _user_defined(value):
                self.ipython.append((use, where))
                return []
            if hasattr(builtins, name) and _is_builtin_or_standin(getattr(builtins, name), value):
                return []  # the builtin itself, or IPython's stand-in for it (open, exit, quit)
            entry, deps = self._classify(name, value)
            self.closure.entries[name] = entry
            return deps
        if name in _IPYTHON_ONLY:
            self.ipython.append((use, where))
        elif hasattr(builtins, name) or use.soft:
            pass
        elif where.strict or not use.deferred:
            self.undefined.append((use, where))
        else:
            self._note_missing(where, name)
        return []

    def _note_missing(self, where: Where, name: str) -> None:
        """A notebook function refers to a name that does not exist: note it, don't refuse.

        The notebook tolerates this until the function runs (e.g. a branch never taken), so the
        bundle does too; the report shows it.
        """
        entry = self.closure.entries.get(where.owner) if where.owner else None
        if entry is not None:
            marker = "; uses undefined "
            if marker in entry.detail:
                entry.detail += f", {name}"
            else:
                entry.detail += f"{marker}{name}"

    # ------------------------------------------------------------------ classification

    def _classify(self, name: str, value: Any) -> tuple[Entry, list[tuple[FreeName, Where]]]:
        if isinstance(value, types.ModuleType):
            stmt = import_for_module(name, value)
            if stmt is not None:
                return Entry(name, CaptureKind.IMPORT, stmt, value, stmt), []
            return self._pickle(name, value, "module not importable by name"), []
        text = literal_source(value, self.options.max_literal_chars)
        if text is not None:
            return Entry(name, CaptureKind.LITERAL, _literal_detail(value, text), value, text), []
        if _is_notebook_definition(value):
            return self._notebook_definition(name, value)
        stmt = import_for_object(name, value)
        if stmt is not None:
            return Entry(name, CaptureKind.IMPORT, stmt, value, stmt), []
        return self._pickle(name, value), []

    def _pickle(self, name: str, value: Any, why: str = "") -> Entry:
        detail = describe_object(value) + (f" ({why})" if why else "")
        return Entry(name, CaptureKind.PICKLE, detail, value)

    def _notebook_definition(self, name: str, value: Any) -> tuple[Entry, list[tuple[FreeName, Where]]]:
        is_class = isinstance(value, type)
        what = "class" if is_class else "function"
        target = value if is_class else inspect.unwrap(value)
        own_name = target.__name__
        if not is_class and target.__closure__:
            closed = ", ".join(target.__code__.co_freevars)
            why = f"function closes over local variables ({closed}); pickled by value"
            return self._pickle(name, value, why), []
        if target.__qualname__ != own_name or own_name == "<lambda>":
            why = "a lambda" if own_name == "<lambda>" else "defined inside another function or class"
            return self._pickle(name, value, f"{what} defined in the notebook, {why}; pickled by value"), []
        if name != own_name:
            if self.ns.get(own_name) is value:
                text = f"{name} = {own_name}"
                entry = Entry(name, CaptureKind.SOURCE, f"same {what} as {own_name}", value, text)
                entry.eager = (own_name,)
                return entry, [(FreeName(own_name, (), False, False), Where(what, owner=name))]
            why = f"{what} {own_name} defined in the notebook, now bound to another name; pickled by value"
            return self._pickle(name, value, why), []
        source = self.finder.class_source(target) if is_class else self.finder.function_source(target)
        if source is None:
            why = f"{what} defined in the notebook whose source was not found; pickled by value"
            return self._pickle(name, value, why), []
        if value is not target and not source.lstrip().startswith("@"):
            why = "wrapped function defined in the notebook without a decorator; pickled by value"
            return self._pickle(name, value, why), []
        analysis = _analyze_definition(source, name)
        free = analysis.free_names()
        entry = Entry(
            name,
            CaptureKind.SOURCE,
            f"{what} defined in the notebook",
            value,
            source,
            eager=tuple(n for n, f in free.items() if not f.deferred),
            lazy=tuple(n for n, f in free.items() if f.deferred),
        )
        where = Where(f"{what} {name} (defined in the notebook)", owner=name)
        return entry, [(f, where) for f in free.values()]

    # ------------------------------------------------------------------ errors

    def _raise_problems(self) -> None:
        if self.ipython:
            places = "; ".join(f"{u.name!r} at {w.lines(u.lines)}" for u, w in self.ipython)
            raise CaptureError(
                f"The code uses IPython features that workers do not have ({places}): a %magic or "
                f"!shell escape becomes get_ipython(), and display() needs IPython. Workers run plain "
                f"Python without IPython. Move the magic/shell command to a separate cell (or use "
                f"subprocess/os inside the cell), and use print() instead of display()."
            )
        if self.undefined:
            rows = "\n".join(f"  - {u.name!r} at {w.lines(u.lines)}" for u, w in self.undefined)
            names = ", ".join(repr(u.name) for u, _ in self.undefined)
            raise UndefinedNameError(
                f"Undefined name{'s' if len(self.undefined) > 1 else ''} {names}: the notebook does "
                f"not define {'them' if len(self.undefined) > 1 else 'it'}.\n{rows}\n"
                f"Define it in an earlier cell and run that cell, or define it inside this cell."
            )


def _analyze_definition(source: str, name: str) -> Analysis:
    tree = parse_source(source, line_offset=0, what=f"definition of {name}")
    return analyze(tree)


def _is_notebook_definition(value: Any) -> bool:
    """A class, or a (possibly decorated) function, whose module is the notebook's ``__main__``."""
    try:
        if isinstance(value, type):
            return value.__module__ == "__main__"
        if getattr(value, "__module__", None) != "__main__":
            return False
        return isinstance(inspect.unwrap(value), types.FunctionType)
    except Exception:  # noqa: BLE001  # any user object: unwrap loops, raising __getattr__
        return False


def _user_defined(value: Any) -> bool:
    try:
        return getattr(value, "__module__", None) == "__main__"
    except Exception:  # noqa: BLE001  # any user object
        return False


def _is_builtin_or_standin(builtin: Any, value: Any) -> bool:
    """``value`` is the builtin, wraps it (IPython's ``open``), or comes from IPython (``exit``)."""
    if value is builtin:
        return True
    try:
        if getattr(value, "__wrapped__", None) is builtin:
            return True
        module = getattr(value, "__module__", None) or type(value).__module__
    except Exception:  # noqa: BLE001  # any user object
        return False
    return isinstance(module, str) and module.split(".")[0] in ("IPython", "ipykernel")


def _literal_detail(value: Any, text: str) -> str:
    """``"int 64"``, ``"str 'adam'"``, ``"list of 3 items"`` (long text shortened)."""
    kind = type(value).__name__
    if isinstance(value, (list, tuple, dict, set, frozenset)):
        return f"{kind} of {len(value)} item{'s' if len(value) != 1 else ''}"
    return f"{kind} {text if len(text) <= 40 else text[:37] + '...'}"


def describe_object(value: Any) -> str:
    """Short description for reports: ``"ndarray float64 (1000, 1000)"``, ``"Linear instance"``."""
    kind = type(value)
    name = kind.__qualname__
    try:
        shape = getattr(value, "shape", None)
        dtype = getattr(value, "dtype", None)
    except Exception:  # noqa: BLE001  # a description must never fail the capture
        shape = dtype = None
    if shape is not None and dtype is not None and not isinstance(value, type):
        try:
            return f"{name} {dtype} {tuple(shape)}"
        except Exception:  # noqa: BLE001  # a description must never fail the capture
            pass
    if isinstance(value, types.FunctionType):
        return f"function {value.__qualname__}"
    if isinstance(value, type):
        return f"class {value.__qualname__}"
    if kind in (list, tuple, dict, set, frozenset):
        return f"{name} of {len(value)} item{'' if len(value) == 1 else 's'}"
    module = kind.__module__
    where = "" if module in ("builtins", "__main__") else f" ({module})"
    return f"{name} instance{where}"
