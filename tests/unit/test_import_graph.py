"""No import cycles inside nbtrain/: every import counts, at module level or inside a function (a lazy import
hides a cycle, it does not remove it), relative ones included; only imports under ``if TYPE_CHECKING:`` (which
never run) are left out."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "nbtrain"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(node: ast.ImportFrom, name: str, path: Path) -> str:
    """The module ``from X import ...`` names, relative imports (``from .x import y``) resolved against ``name``."""
    if node.level == 0:
        return node.module or ""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        type_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                     and "TYPE_CHECKING" in ast.unparse(block.test) for n in ast.walk(block)}
        for node in ast.walk(tree):  # module level and inside functions alike
            if id(node) in type_only:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = _absolute(node, name, path)
                targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module
                           for alias in node.names]
            for target in targets:
                if target in modules and target != name:
                    graph[name].add(target)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            # a package's __init__ importing its own submodules is not a cycle through the package
            if nxt == node.rsplit(".", 1)[0] and node.startswith(nxt + "."):
                continue
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_nbtrain_has_no_import_cycles() -> None:
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_relative_imports_are_edges_too() -> None:
    # bundle/ imports its siblings relatively (`from .reader import ...`): a cycle through those counts too
    graph = _graph()
    assert "nbtrain.bundle.reader" in graph["nbtrain.bundle.model"]
    assert "nbtrain.bundle.cellbody" in graph["nbtrain.bundle.render"]


def test_imports_inside_functions_are_edges_too() -> None:
    # the option checks load a backend's capabilities lazily; that import is counted like any other
    graph = _graph()
    assert "nbtrain.registry" in graph["nbtrain.flags.support"]
    assert "nbtrain.contract" in graph["nbtrain.flags.support"]  # imported inside _declared


def test_a_relative_import_resolves_like_python() -> None:
    def resolve(line: str, name: str, file: str) -> str:
        node = ast.parse(line).body[0]
        assert isinstance(node, ast.ImportFrom)
        return _absolute(node, name, Path(file))

    assert resolve("from .capture import x", "nbtrain.bundle.build", "build.py") == "nbtrain.bundle.capture"
    assert resolve("from .capture import x", "nbtrain.bundle", "__init__.py") == "nbtrain.bundle.capture"
    assert resolve("from ..events import x", "nbtrain.bundle.build", "build.py") == "nbtrain.events"
    assert resolve("from . import capture", "nbtrain.bundle.build", "build.py") == "nbtrain.bundle"


def test_the_bottom_layer_imports_nothing_above_it() -> None:
    graph = _graph()
    assert graph["nbtrain.model"] <= {"nbtrain.events"}
    assert graph["nbtrain.backends.verdict"] <= {"nbtrain.model"}
