"""Free-name analysis: what a cell needs from the notebook, order-aware, scope-aware."""

from __future__ import annotations

import ast
import builtins

import pytest

from nbtrain.bundle.analysis import analyze


def free(source: str) -> dict[str, tuple[int, ...]]:
    """Free names (builtins dropped, as the resolver does) -> lines."""
    names = analyze(ast.parse(source)).free_names()
    return {n: f.lines for n, f in names.items() if not hasattr(builtins, n)}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("x = x + 1", {"x": (1,)}),
        ("y = 1\nprint(y)", {}),
        ("print(a)\na = 1\nprint(a)", {"a": (1,)}),
        ("x += 1", {"x": (1,)}),
        ("import numpy as np\nnp.zeros(1)", {}),
        ("from a.b import c as dd\ndd", {}),
        ("import os.path\nos.path.join('a')", {}),
        ("del q", {"q": (1,)}),
        ("x = 1\ndel x", {}),
        ("print(__name__, __file__, __doc__)", {}),
    ],
)
def test_module_level_is_order_aware(source: str, expected: dict[str, tuple[int, ...]]) -> None:
    assert free(source) == expected


def test_builtins_are_not_free() -> None:
    assert free("print(len(range(3)), ValueError, open)") == {}


def test_function_bodies_see_module_bindings_made_anywhere() -> None:
    source = "def f():\n    return g() + z + w\nz = 1\ndef g():\n    return 2\n"
    names = analyze(ast.parse(source)).free_names()
    assert list(names) == ["w"]
    assert names["w"].deferred and names["w"].lines == (2,)


def test_decorators_defaults_and_bases_are_evaluated_at_definition_time() -> None:
    source = "@deco\ndef f(a=DEFAULT):\n    return a\nclass C(Base, metaclass=Meta):\n    pass\n"
    names = analyze(ast.parse(source)).free_names()
    assert list(names) == ["deco", "DEFAULT", "Base", "Meta"]
    assert not any(n.deferred for n in names.values())


def test_nested_scopes_parameters_locals_and_closures() -> None:
    source = (
        "def outer(p):\n"
        "    v = p\n"
        "    def inner():\n"
        "        nonlocal v\n"
        "        v += 1\n"
        "        return v + w + p\n"
        "    return inner\n"
        "f = lambda a, b=dflt: a + b + outer_global\n"
    )
    assert free(source) == {"w": (6,), "dflt": (8,), "outer_global": (8,)}


def test_class_scope_is_not_visible_in_methods_or_comprehensions() -> None:
    source = (
        "class A(Base):\n"
        "    x = 1\n"
        "    y = x + ext\n"
        "    z = [x for _ in range(3)]\n"
        "    def m(self):\n"
        "        return x\n"
    )
    names = analyze(ast.parse(source)).free_names()
    assert {n: f.lines for n, f in names.items() if n != "range"} == {"Base": (1,), "ext": (3,), "x": (4, 6)}


def test_comprehensions_have_their_own_scope() -> None:
    assert free("[i for i in data if i > lim]") == {"data": (1,), "lim": (1,)}
    assert free("[j for i in range(3) for j in rows[i]]") == {"rows": (1,)}
    assert free("{k: v for k, v in pairs}\nk") == {"pairs": (1,), "k": (2,)}
    assert free("g = (i for i in src)") == {"src": (1,)}


def test_walrus_binds_in_the_enclosing_scope() -> None:
    assert free("if (n := compute()) > 0:\n    print(n)") == {"compute": (1,)}
    assert free("[y := f(x) for x in xs]\nprint(y)") == {"f": (1,), "xs": (1,)}


def test_except_with_for_and_match_bind_names() -> None:
    source = (
        "try:\n    pass\nexcept Err as e:\n    print(e)\n"
        "with ctx() as (fh, gh):\n    fh.read(); gh.read()\n"
        "for k, v in d.items():\n    print(k, v)\n"
        "match cmd:\n"
        "    case Point(x=0, y=yy):\n        print(yy)\n"
        "    case [a, *rest]:\n        print(a, rest)\n"
        "    case {'k': val, **kw}:\n        print(val, kw)\n"
        "    case Color.RED as red:\n        print(red)\n"
    )
    assert free(source) == {"Err": (3,), "ctx": (5,), "d": (7,), "cmd": (9,), "Point": (10,), "Color": (16,)}


def test_global_statements() -> None:
    assert free("def f():\n    global H\n    H = 1\ndef g():\n    return H") == {}
    # Bound only by calling a function first: maybe bound, so soft (no error if the notebook lacks it).
    names = analyze(ast.parse("def f():\n    global G\n    G = 1\nf()\nprint(G)")).free_names()
    assert names["G"].soft


def test_loop_carried_names_and_annotations_are_soft() -> None:
    source = "for step in range(3):\n    if step:\n        print(loss)\n    loss = step\nx: Annot = 1\n"
    names = analyze(ast.parse(source)).free_names()
    assert names["loss"].soft and names["Annot"].soft
    assert not analyze(ast.parse("x = x + 1")).free_names()["x"].soft


def test_async_code_and_fstrings() -> None:
    source = "async def f():\n    async with lock as l:\n        async for i in it:\n            await l(i)\n"
    assert free(source) == {"lock": (2,), "it": (3,)}
    assert free("f'{val:>{width}}'") == {"val": (1,), "width": (1,)}


def test_bound_lists_every_module_level_binding() -> None:
    analysis = analyze(ast.parse("import os\nx = 1\ndef f():\n    global g\n    g = 2\nclass C: pass\n"))
    assert analysis.bound == {"os", "x", "f", "g", "C"}
