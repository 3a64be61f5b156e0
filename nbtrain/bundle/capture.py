"""Turn a cell (or a function call) plus the notebook namespace into a :class:`Bundle`.

Steps: parse (syntax errors with cell line numbers) -> free names -> closure (import / source /
literal / pickle; undefined names and IPython-only features refused) -> objects.pkl (unpicklable
objects and the size cap refused) -> main.py -> secrets refused (env var values anywhere in the
bundle, then secret-named literals) -> manifest. Nothing touches the disk; :meth:`Bundle.write` does.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import keyword
import os
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nbtrain.errors import CaptureError

from .analysis import analyze
from .cellbody import RESULT_NAME, parse_source, prepare_cell_body, remove_lines, require_code
from .literals import literal_source
from .localmods import MODULES_DIR, local_module_files
from .manifest import build_manifest, nbtrain_version
from .model import Bundle, CapturedName, CaptureKind, CaptureOptions
from .order import OBJECTS, order_nodes
from .pickling import PickledObjects, pickle_objects
from .render import Section, comment_text, definitions_and_objects, render_main
from .report import kind_summary
from .resolve import Closure, Entry, Where, describe_object, resolve_closure
from .secrets import check_env_secrets, check_secret_literals
from .source import SourceFinder

__all__ = ["capture_cell", "capture_function"]

_ARGS, _KWARGS = "_nbtrain_args", "_nbtrain_kwargs"
_DEFAULT_OPTIONS = CaptureOptions()  # frozen: safe to share as a default


def capture_cell(
    cell: str,
    namespace: Mapping[str, Any],
    *,
    history: Sequence[str] = (),
    options: CaptureOptions = _DEFAULT_OPTIONS,
    cell_line_offset: int = 1,
    notebook: Mapping[str, str] | None = None,
) -> Bundle:
    """Package ``cell`` and everything it uses from ``namespace`` into a :class:`Bundle`.

    ``cell`` is the body after IPython's ``transform_cell``, without the ``%%distributed`` line;
    ``cell_line_offset`` lines precede it in the editor, so body line 1 is cell line
    ``1 + cell_line_offset`` in every message and in main.py. ``history`` (IPython's ``In``) is searched
    for the source of notebook classes/functions that :mod:`inspect` cannot find. ``notebook`` (e.g.
    ``{"path": ..., "cell_id": ...}``) is recorded in the manifest.

    Raises :class:`CellSyntaxError`, :class:`UndefinedNameError`, :class:`UnpicklableError`,
    :class:`BundleTooLargeError`, :class:`SecretInBundleError` or :class:`CaptureError`.
    """
    tree = parse_source(cell, line_offset=cell_line_offset, what="cell")
    require_code(tree)
    analysis = analyze(tree)
    closure = resolve_closure(
        analysis.free_names(),
        namespace,
        where=Where("cell", cell_line_offset),
        cell_bound=analysis.bound,
        history=history,
        options=options,
    )
    body = prepare_cell_body(cell, tree)
    first = 1 + cell_line_offset
    return _assemble(
        kind="cell",
        closure=closure,
        extra=[],
        options=options,
        notebook=notebook,
        future=body.future,
        body=body.text,
        body_title=f"the cell (cell line {first} is line {{line}} here)",
        own_code="the cell's own code",
        cell_info={"sha256": hashlib.sha256(cell.encode("utf-8")).hexdigest(), "line_offset": cell_line_offset},
        function=None,
    )


def capture_function(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    history: Sequence[str] = (),
    options: CaptureOptions = _DEFAULT_OPTIONS,
    notebook: Mapping[str, str] | None = None,
) -> Bundle:
    """Package the call ``fn(*args, **kwargs)`` into a :class:`Bundle`.

    A notebook function ships as source without its ``@distributed(...)``/``@nbtrain.distributed(...)``
    decorator, with what it uses resolved against its globals like a cell's names; a function from a
    real module is imported; anything else (closures, lambdas, callable objects) is pickled. Plain
    ``args``/``kwargs`` are written as literals, others pickled. main.py ends with
    ``__nbtrain_result__ = fn(*args, **kwargs)``. Raises the same errors as :func:`capture_cell`.
    """
    if not callable(fn):
        raise CaptureError(f"capture_function needs a function, got {type(fn).__name__} {fn!r}.")
    kwargs = dict(kwargs)
    bad = [k for k in kwargs if not isinstance(k, str) or not k.isidentifier()]
    if bad:
        raise CaptureError(f"Keyword argument names must be identifiers, got {bad!r}.")
    target = _unwrap(fn)
    name = getattr(target, "__name__", None)
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        name = "_nbtrain_fn"  # a lambda or a callable object: pickled under a plain name
    namespace: Mapping[str, Any] = getattr(target, "__globals__", None) or {}
    source = _function_source(target, history) if isinstance(target, types.FunctionType) else None

    if source is not None:
        tree = parse_source(source, line_offset=0, what=f"function {name}")
        analysis = analyze(tree)
        closure = resolve_closure(
            analysis.free_names(),
            namespace,
            where=Where(f"function {name}"),
            cell_bound=analysis.bound,
            history=history,
            options=options,
        )
    else:
        closure = Closure()
        closure.entries[name] = _entry_for_callable(name, fn)

    extra: list[Entry] = []
    call_lines = []
    for var, value, what in ((_ARGS, tuple(args), "positional"), (_KWARGS, kwargs, "keyword")):
        text = literal_source(value, options.max_literal_chars)
        detail = f"{what} arguments of {name}()"
        if text is None:
            extra.append(Entry(var, CaptureKind.PICKLE, f"{detail}: {describe_object(value)}", value))
        else:
            extra.append(Entry(var, CaptureKind.LITERAL, detail, value, text))
            call_lines.append(f"{var} = {text}\n")
    call_lines.append(f"{RESULT_NAME} = {name}(*{_ARGS}, **{_KWARGS})\n")
    call = "".join(call_lines)
    body = f"{source}\n\n{call}" if source is not None else call
    return _assemble(
        kind="function",
        closure=closure,
        extra=extra,
        options=options,
        notebook=notebook,
        future=(),
        body=body,
        body_title=f"the function {name}, without its nbtrain decorator, and the call"
        if source is not None
        else f"the call of {name}",
        own_code=f"the source of function {name}",
        cell_info=None,
        function=name,
    )


# ---------------------------------------------------------------------- function helpers


def _unwrap(fn: Callable[..., Any]) -> Any:
    try:
        return inspect.unwrap(fn)
    except ValueError:
        return fn


def _function_source(fn: types.FunctionType, history: Sequence[str]) -> str | None:
    """The source of a top-level notebook function without its nbtrain decorator(s), or None."""
    if fn.__module__ != "__main__" or fn.__qualname__ != fn.__name__ or fn.__name__ == "<lambda>":
        return None
    if fn.__closure__:
        return None
    source = SourceFinder(tuple(history)).function_source(fn)
    if source is None:
        return None
    node = ast.parse(source).body[0]
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    spans = [
        (d.lineno, d.end_lineno or d.lineno) for d in node.decorator_list if _is_nbtrain_decorator(d, fn.__globals__)
    ]
    return remove_lines(source, spans) if spans else source


def _is_nbtrain_decorator(node: ast.expr, namespace: Mapping[str, Any]) -> bool:
    """``@distributed``, ``@distributed(...)``, ``@nbtrain.distributed(...)`` (from nbtrain)."""
    expr = node.func if isinstance(node, ast.Call) else node
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.insert(0, expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return False
    parts.insert(0, expr.id)
    if parts[-1] != "distributed":
        return False
    try:
        obj: Any = namespace.get(parts[0])
        for part in parts[1:]:
            obj = getattr(obj, part, None)
        module = getattr(obj, "__module__", None) or getattr(obj, "__name__", "")
    except Exception:  # noqa: BLE001  # e.g. a lazy attribute failing to import: trust the name
        return True
    if obj is None:
        return True  # not resolvable: trust the name
    return isinstance(module, str) and module.split(".")[0] == "nbtrain"


def _entry_for_callable(name: str, fn: Any) -> Entry:
    from .imports import import_for_object

    stmt = import_for_object(name, fn)
    if stmt is not None:
        return Entry(name, CaptureKind.IMPORT, stmt, fn, stmt)
    return Entry(
        name, CaptureKind.PICKLE, f"{describe_object(fn)}: {_why_not_source(_unwrap(fn))}; pickled by value", fn
    )


def _why_not_source(fn: Any) -> str:
    if not isinstance(fn, types.FunctionType):
        return "a callable object, not a function"
    if fn.__closure__:
        return f"closes over local variables ({', '.join(fn.__code__.co_freevars)})"
    if fn.__name__ == "<lambda>":
        return "a lambda"
    if fn.__qualname__ != fn.__name__:
        return "defined inside another function or class"
    if fn.__module__ != "__main__":
        return f"not importable from its module {fn.__module__}"
    return "its source was not found"


# ---------------------------------------------------------------------- assembly


def _assemble(
    *,
    kind: str,
    closure: Closure,
    extra: list[Entry],
    options: CaptureOptions,
    notebook: Mapping[str, str] | None,
    future: Sequence[str],
    body: str,
    body_title: str,
    own_code: str,
    cell_info: dict[str, Any] | None,
    function: str | None,
) -> Bundle:
    imports = sorted(closure.of_kind(CaptureKind.IMPORT), key=lambda e: (e.text.startswith("from "), e.text))
    literals = closure.of_kind(CaptureKind.LITERAL)
    sources = closure.of_kind(CaptureKind.SOURCE)
    pickles = closure.of_kind(CaptureKind.PICKLE) + [e for e in extra if e.kind is CaptureKind.PICKLE]
    by_source: dict[int, str] = {}
    for entry in sources:
        by_source.setdefault(id(entry.value), entry.name)
    pickled: PickledObjects | None = None
    if pickles:
        pickled = pickle_objects({e.name: e.value for e in pickles}, by_source, max_bytes=options.max_pickle_bytes)
    order = _definition_order(sources, pickles, pickled)

    captured = _captured(imports, literals, sources, order, pickles, pickled, extra)

    sections: list[Section] = []
    if imports:
        sections.append(Section("imports", "".join(e.text + "\n" for e in imports)))
    if literals:
        sections.append(Section("values from the notebook", "".join(f"{e.name} = {e.text}\n" for e in literals)))
    sections += definitions_and_objects(
        order,
        {e.name: e.text for e in sources},
        [e.name for e in pickles],
        len(pickled.data) if pickled is not None else 0,
    )
    attached = _read_extra_files(options.extra_files)
    if attached:
        listing = "".join(f"#   {comment_text(rel)} ({len(data)} bytes)\n" for rel, data in attached.items())
        sections.append(Section("attached files (next to this file)", listing))
    # local modules (next to the notebook, not installed) that the imports and pickled objects come from
    local = local_module_files([e.value for e in imports] + [e.value for e in pickles])
    if local:
        listing = "".join(f"#   {comment_text(rel)} ({len(data)} bytes)\n" for rel, data in local.items())
        sections.append(Section(f"local modules (in {MODULES_DIR}/, on sys.path when this runs)", listing))
    main = render_main(
        intro=_intro(kind, function, notebook, captured),
        future=future,
        sections=sections,
        body_title=body_title,
        body=body,
    )
    files: dict[str, bytes] = {"main.py": main.text.encode("utf-8")}
    if pickled is not None:
        files["objects.pkl"] = pickled.data
    files.update(attached)
    files.update(local)

    if not options.allow_secrets:
        carriers = [(e.name, e.text) for e in [*imports, *literals, *sources, *extra] if e.text]
        check_env_secrets(os.environ, files=files, carriers=carriers, pickled=pickled, own_code=own_code)
        check_secret_literals((e.name, e.value) for e in literals)  # after: an env var match is more precise

    cell = dict(cell_info, main_line=main.body_line) if cell_info is not None else None
    manifest = build_manifest(
        kind=kind, files=files, captured=captured, notebook=notebook, cell=cell, function=function
    )
    return Bundle(files=files, manifest=manifest, captured=tuple(captured))


def _captured(
    imports: list[Entry],
    literals: list[Entry],
    sources: list[Entry],
    order: list[str],
    pickles: list[Entry],
    pickled: PickledObjects | None,
    extra: list[Entry],
) -> list[CapturedName]:
    """What the bundle captured, in main.py's order: imports, literals, sources (definition order), pickles, extras."""
    captured = [CapturedName(e.name, e.kind, len(e.text.encode()), e.detail) for e in imports]
    captured += [CapturedName(e.name, e.kind, len(e.text.encode()), e.detail) for e in literals]
    by_name = {e.name: e for e in sources}
    captured += [
        CapturedName(n, CaptureKind.SOURCE, len(by_name[n].text.encode()), by_name[n].detail)
        for n in order
        if n != OBJECTS
    ]
    sizes = pickled.sizes if pickled is not None else {}
    captured += [CapturedName(e.name, e.kind, sizes.get(e.name, 0), e.detail) for e in pickles]
    captured += [
        CapturedName(e.name, e.kind, len(e.text.encode()), e.detail) for e in extra if e.kind is CaptureKind.LITERAL
    ]
    return captured


def _definition_order(sources: list[Entry], pickles: list[Entry], pickled: PickledObjects | None) -> list[str]:
    pickle_names = {e.name for e in pickles}
    names = [e.name for e in sources] + ([OBJECTS] if pickled is not None else [])
    eager: dict[str, list[str]] = {e.name: [OBJECTS if d in pickle_names else d for d in e.eager] for e in sources}
    if pickled is not None:
        eager[OBJECTS] = sorted(pickled.refs)
    lazy = {e.name: list(e.lazy) for e in sources}
    return order_nodes(names, eager, lazy)


def _intro(
    kind: str, function: str | None, notebook: Mapping[str, str] | None, captured: list[CapturedName]
) -> list[str]:
    nb = dict(notebook or {})
    origin = f"function {function}()" if kind == "function" else "a cell"
    if kind == "cell" and nb.get("cell_id"):
        origin = f"cell {nb['cell_id']}"
    origin += f" of {nb['path']}" if nb.get("path") else " of a notebook"
    again = "re-run the cell instead" if kind == "cell" else "call the function again instead"
    return [
        f"Generated by nbtrain {nbtrain_version()} from {origin} — do not edit; {again}.",
        f"Bundle manifest: manifest.json (sha256 of every file). Captured: {kind_summary(captured)}.",
    ]


def _read_extra_files(paths: Sequence[str]) -> dict[str, bytes]:
    attached: dict[str, bytes] = {}
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.is_file():
            what = "a directory" if path.is_dir() else "missing"
            raise CaptureError(f"Cannot attach {raw!r}: it is {what}. extra_files takes paths of existing files.")
        rel = f"files/{path.name}"
        if rel in attached:
            raise CaptureError(
                f"Cannot attach {raw!r}: another attached file is also called {path.name!r}; "
                f"attached files keep only their base name, so rename one of them."
            )
        attached[rel] = path.read_bytes()
    return attached
