"""Free-name analysis: which names does a piece of module-level code need from outside?

``analyze(tree)`` walks a parsed cell (or a captured definition) the way Python would run it:

- Module level is *order-aware*: ``x = x + 1`` needs ``x`` from outside; ``y = 1; print(y)`` does not.
- Function and lambda bodies run later, so a global they load is free unless the code binds it at
  module level *anywhere* (before or after the definition). Decorators, default values, annotations
  and class bases are evaluated at definition time, in order.
- Class bodies run at once in their own scope; comprehensions have their own scope, but their first
  iterable is evaluated outside. ``global``/``nonlocal``, ``del``, the walrus operator, ``except ... as``,
  ``with ... as``, ``for`` targets, imports and ``match`` captures all bind as Python binds them.

Builtins are *not* removed here: whether ``open`` is the builtin or a notebook variable that shadows it
is decided by the resolver, which sees the namespace. Dunder module attributes (``__name__``,
``__file__``...) are never free.

Each use is flagged:

- ``deferred``: it sits in a function body (evaluated only when called), so the definition that
  contains it does not need the name to exist *before* it.
- ``soft``: the name might legitimately be missing: it appears only in an annotation, it is read in a
  module-level loop that also binds it (``for ...: if step: print(loss); loss = ...``), or only a
  function's ``global`` statement binds it. A soft name is captured when the namespace has it and
  silently skipped when it does not.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

__all__ = ["Analysis", "FreeName", "NameUse", "analyze"]

#: Names every module has; never captured.
MODULE_DUNDERS = frozenset(
    {
        "__name__",
        "__file__",
        "__doc__",
        "__builtins__",
        "__spec__",
        "__loader__",
        "__package__",
        "__annotations__",
        "__cached__",
        "__class__",  # implicit closure cell of methods (super())
    }
)


@dataclass(frozen=True)
class NameUse:
    """One read of a name that the analysed code does not bind itself (1-based ``line``)."""

    name: str
    line: int
    deferred: bool
    soft: bool


@dataclass(frozen=True)
class FreeName:
    """All uses of one free name, merged: ``lines`` in source order without duplicates.

    ``deferred`` is true when every use is deferred; ``soft`` when every use is soft.
    """

    name: str
    lines: tuple[int, ...]
    deferred: bool
    soft: bool


@dataclass(frozen=True)
class Analysis:
    """Result of :func:`analyze`.

    ``uses`` lists free uses in source order; ``bound`` is every name the code binds at module level
    (anywhere, including through ``global`` declarations in functions).
    """

    uses: tuple[NameUse, ...]
    bound: frozenset[str]

    def free_names(self) -> dict[str, FreeName]:
        """Merge ``uses`` per name, keeping first-use order."""
        lines: dict[str, list[int]] = {}
        deferred: dict[str, bool] = {}
        soft: dict[str, bool] = {}
        for use in self.uses:
            seen = lines.setdefault(use.name, [])
            if use.line not in seen:
                seen.append(use.line)
            deferred[use.name] = deferred.get(use.name, True) and use.deferred
            soft[use.name] = soft.get(use.name, True) and use.soft
        return {name: FreeName(name, tuple(ls), deferred[name], soft[name]) for name, ls in lines.items()}


def analyze(tree: ast.Module) -> Analysis:
    """Return the free names of ``tree`` (a parsed module: a cell or one captured definition)."""
    bound_all, via_global = _module_bindings(tree.body)
    walker = _Walker(bound_all, via_global)
    walker.run(tree)
    return Analysis(tuple(walker.uses), frozenset(bound_all))


# --------------------------------------------------------------------------- binding collection

_FUNC_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_COMP_NODES = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _own_nodes(nodes: Iterable[ast.AST]) -> Iterator[ast.AST]:
    """Yield ``nodes`` and their descendants that belong to the same scope.

    The bodies of nested functions, lambdas and classes are skipped (their names and, for
    functions, decorators/defaults still belong here). Comprehensions are entered, because a walrus
    inside one binds in this scope; their own targets are filtered out by the caller.
    """
    stack = list(nodes)[::-1]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            children: list[ast.AST] = [*node.decorator_list, *_arg_defaults(node.args)]
            children += _annotations(node)
        elif isinstance(node, ast.Lambda):
            children = list(_arg_defaults(node.args))
        elif isinstance(node, ast.ClassDef):
            children = [*node.decorator_list, *node.bases, *node.keywords]
        else:
            children = list(ast.iter_child_nodes(node))
        stack.extend(reversed(children))


def _arg_defaults(args: ast.arguments) -> list[ast.expr]:
    return [*args.defaults, *(d for d in args.kw_defaults if d is not None)]


def _annotations(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.expr]:
    a = node.args
    every = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    if a.vararg:
        every.append(a.vararg)
    if a.kwarg:
        every.append(a.kwarg)
    found = [arg.annotation for arg in every if arg.annotation is not None]
    if node.returns is not None:
        found.append(node.returns)
    return found


def _comp_targets(nodes: Iterable[ast.AST]) -> set[str]:
    """Names bound as comprehension targets (they are local to the comprehension)."""
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.comprehension):
            names |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
    return names


def _bound_in(nodes: Iterable[ast.AST]) -> tuple[set[str], set[str], set[str]]:
    """Return (bound names, ``global`` names, ``nonlocal`` names) of one scope's own nodes."""
    own = list(_own_nodes(nodes))
    comp_only = _comp_targets(own)
    bound: set[str] = set()
    declared_global: set[str] = set()
    declared_nonlocal: set[str] = set()
    walrus: set[str] = set()
    for node in own:
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            walrus.add(node.target.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {_import_binding(alias) for alias in node.names if alias.name != "*"}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bound.add(node.rest)
        elif isinstance(node, ast.Global):
            declared_global |= set(node.names)
        elif isinstance(node, ast.Nonlocal):
            declared_nonlocal |= set(node.names)
    # Comprehension targets are local to the comprehension, unless also bound in this scope.
    bound = (bound - comp_only) | {n for n in bound & comp_only if _stored_outside_comp(own, n)}
    bound |= walrus
    return bound, declared_global, declared_nonlocal


def _stored_outside_comp(own: list[ast.AST], name: str) -> bool:
    comp_target_nodes = {id(n) for node in own if isinstance(node, ast.comprehension) for n in ast.walk(node.target)}
    return any(
        isinstance(n, ast.Name)
        and n.id == name
        and isinstance(n.ctx, (ast.Store, ast.Del))
        and id(n) not in comp_target_nodes
        for n in own
    )


def _import_binding(alias: ast.alias) -> str:
    return alias.asname or alias.name.partition(".")[0]


def _module_bindings(body: list[ast.stmt]) -> tuple[set[str], set[str]]:
    """Names bound at module level: all of them, and those bound only through ``global`` in functions."""
    bound, _, _ = _bound_in(body)
    via_global: set[str] = set()
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Global):
            via_global |= set(node.names)
    return bound | via_global, via_global - bound


# --------------------------------------------------------------------------- the walker


@dataclass
class _Scope:
    kind: str  # "module" | "class" | "function" | "comprehension"
    parent: _Scope | None
    deferred: bool
    names: set[str] = field(default_factory=set)  # locals (function/comp) or bound-so-far (module/class)
    declared_global: set[str] = field(default_factory=set)


class _Walker(ast.NodeVisitor):
    """Visits nodes in evaluation order and records free loads."""

    def __init__(self, bound_all: set[str], via_global: set[str]) -> None:
        self.bound_all = bound_all
        self.via_global = via_global  # bound by calling a function first: maybe bound, so soft
        self.uses: list[NameUse] = []
        self.scope = _Scope("module", None, deferred=False)
        self.module = self.scope
        self.pending: list[tuple[_Scope, ast.AST]] = []  # function bodies, walked after the module
        self.loop_bound: list[set[str]] = []  # names bound by enclosing module-level loops
        self.in_annotation = 0

    def run(self, tree: ast.Module) -> None:
        for stmt in tree.body:
            self.visit(stmt)
        while self.pending:
            scope, node = self.pending.pop(0)
            self._walk_function_body(scope, node)

    # ----------------------------------------------------------------- name resolution

    def _bind(self, name: str) -> None:
        scope = self.scope
        while scope.kind == "comprehension" and scope.parent is not None:
            # Only a walrus reaches here from a comprehension; it binds in the enclosing scope.
            scope = scope.parent
        if scope.kind in ("module", "class") and name not in scope.declared_global:
            scope.names.add(name)
        elif name in scope.declared_global:
            self.module.names.add(name)

    def _load(self, name: str, line: int) -> None:
        if name in MODULE_DUNDERS:
            return
        scope: _Scope | None = self.scope
        first = True
        while scope is not None:
            if scope.kind == "module":
                break
            if name in scope.declared_global:
                break
            if scope.kind == "class":
                if first and name in scope.names:
                    return
            elif name in scope.names:
                return
            first = False
            scope = scope.parent
        deferred = self.scope.deferred
        if (name in self.bound_all) if deferred else (name in self.module.names):
            return
        soft = self.in_annotation > 0 or name in self.via_global or any(name in bound for bound in self.loop_bound)
        self.uses.append(NameUse(name, line, deferred, soft))

    # ----------------------------------------------------------------- leaf visitors

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self._load(node.id, node.lineno)
        elif isinstance(node.ctx, ast.Del):
            self._load(node.id, node.lineno)  # ``del x`` needs x to exist
        else:
            self._bind(node.id)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._bind(_import_binding(alias))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name != "*":
                self._bind(_import_binding(alias))

    def visit_Global(self, node: ast.Global) -> None:  # handled by the binding pre-pass
        return

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:  # handled by the binding pre-pass
        return

    # ----------------------------------------------------------------- statements in eval order

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for target in node.targets:
            self.visit(target)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit(node.value)
        if isinstance(node.target, ast.Name):
            self._load(node.target.id, node.target.lineno)
            self._bind(node.target.id)
        else:
            self.visit(node.target)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
        self._annotation(node.annotation)
        if isinstance(node.target, ast.Name):
            if node.value is not None:
                self._bind(node.target.id)
        else:
            self.visit(node.target)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self._bind(node.target.id)

    def _loop(self, node: ast.For | ast.AsyncFor | ast.While) -> None:
        track = not self.scope.deferred
        if track:
            self.loop_bound.append(_bound_in([node])[0])
        try:
            if isinstance(node, ast.While):
                self.visit(node.test)
            else:
                self.visit(node.iter)
                self.visit(node.target)
            for stmt in node.body:
                self.visit(stmt)
        finally:
            if track:
                self.loop_bound.pop()
        for stmt in node.orelse:
            self.visit(stmt)

    visit_For = _loop
    visit_AsyncFor = _loop
    visit_While = _loop

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            self.visit(item.context_expr)
            if item.optional_vars is not None:
                self.visit(item.optional_vars)
        for stmt in node.body:
            self.visit(stmt)

    visit_AsyncWith = visit_With

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.type is not None:
            self.visit(node.type)
        if node.name:
            self._bind(node.name)
        for stmt in node.body:
            self.visit(stmt)

    # match: patterns bind names; values and class patterns load.
    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        if node.pattern is not None:
            self.visit(node.pattern)
        if node.name:
            self._bind(node.name)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        if node.name:
            self._bind(node.name)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        for key in node.keys:
            self.visit(key)
        for pattern in node.patterns:
            self.visit(pattern)
        if node.rest:
            self._bind(node.rest)

    # ----------------------------------------------------------------- definitions and scopes

    def _annotation(self, node: ast.expr | None) -> None:
        if node is None:
            return
        self.in_annotation += 1
        try:
            self.visit(node)
        finally:
            self.in_annotation -= 1

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for deco in node.decorator_list:
            self.visit(deco)
        for default in _arg_defaults(node.args):
            self.visit(default)
        for ann in _annotations(node):
            self._annotation(ann)
        self._bind(node.name)
        self.pending.append((self.scope, node))

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for default in _arg_defaults(node.args):
            self.visit(default)
        self.pending.append((self.scope, node))

    def _walk_function_body(
        self, parent: _Scope, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.AST
    ) -> None:
        assert isinstance(node, _FUNC_NODES)
        a = node.args
        params = {arg.arg for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
        params |= {arg.arg for arg in (a.vararg, a.kwarg) if arg is not None}
        body: list[ast.AST] = [node.body] if isinstance(node, ast.Lambda) else list(node.body)
        bound, declared_global, declared_nonlocal = _bound_in(body)
        scope = _Scope(
            "function",
            parent,
            deferred=True,
            names=((bound | params) - declared_global) | declared_nonlocal,
            declared_global=declared_global,
        )
        saved, saved_loops = self.scope, self.loop_bound
        self.scope, self.loop_bound = scope, []
        try:
            for stmt in body:
                self.visit(stmt)
        finally:
            self.scope, self.loop_bound = saved, saved_loops

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for deco in node.decorator_list:
            self.visit(deco)
        for base in node.bases:
            self.visit(base)
        for kw in node.keywords:
            self.visit(kw.value)
        _, declared_global, _ = _bound_in(node.body)
        scope = _Scope("class", self.scope, self.scope.deferred, declared_global=declared_global)
        saved = self.scope
        self.scope = scope
        try:
            for stmt in node.body:
                self.visit(stmt)
        finally:
            self.scope = saved
        self._bind(node.name)

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp) -> None:
        generators = node.generators
        self.visit(generators[0].iter)  # evaluated in the enclosing scope
        targets = _comp_targets(generators)
        scope = _Scope("comprehension", self.scope, self.scope.deferred, names=targets)
        saved = self.scope
        self.scope = scope
        try:
            for i, gen in enumerate(generators):
                if i:
                    self.visit(gen.iter)
                for cond in gen.ifs:
                    self.visit(cond)
            if isinstance(node, ast.DictComp):
                self.visit(node.key)
                self.visit(node.value)
            else:
                self.visit(node.elt)
        finally:
            self.scope = saved

    visit_ListComp = _comprehension
    visit_SetComp = _comprehension
    visit_DictComp = _comprehension
    visit_GeneratorExp = _comprehension
