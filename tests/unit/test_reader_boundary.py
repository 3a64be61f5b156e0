"""Readers of a run (the widget, MLflow forwarding, the server, the CLI) use the read interface, not Run's insides.

The rule, read from the source (AST), so it holds for code paths no test runs:

- ``Run`` (:class:`nbtrain.client.Run`) may be called, to build a handle, and imported for that; it never types
  anything (an annotation, ``isinstance``, a ``TYPE_CHECKING`` import): readers type a run as
  :class:`nbtrain.reader.RunReader` or a protocol that extends it;
- nothing reads ``backend``, ``handle``, ``view``, ``store``, ``record`` or a private attribute of a run, where a
  run is any name or attribute ending in ``run`` (``run``, ``self.run``, ``self._run``, ``source_run``).

And :meth:`Run.__repr__` does no I/O: it shows what the handle already knows.
"""

from __future__ import annotations

import ast
import builtins
import io
import os
from pathlib import Path
from typing import Any, NoReturn

import pytest

from nbtrain.client import Run
from nbtrain.reader import RunFacts, RunReader, TrackedRun
from nbtrain.spec import JobSpec
from nbtrain.store import RunRecord, Store

PACKAGE = Path(__file__).resolve().parents[2] / "nbtrain"
READERS = sorted([PACKAGE / "tracking" / "forwarder.py", PACKAGE / "tracking" / "artifacts.py", PACKAGE / "cli.py",
                  *(PACKAGE / "server").glob("*.py"), *(PACKAGE / "widgets").glob("*.py")])
INSIDES = {"backend", "handle", "view", "store", "record"}


def _names_a_run(node: ast.expr) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name.lower().endswith("run")


def _is_run(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "Run") or (isinstance(node, ast.Attribute) and node.attr == "Run")


def _violations(source: str, where: str) -> list[str]:
    """Each place in ``source`` that types a run as Run or reaches into a run, as ``where:line: what``."""
    tree = ast.parse(source)
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and any(a.name == "Run" for a in inner.names):
                    found.append(f"{where}:{inner.lineno}: `import Run` for typing (use nbtrain.reader.RunReader)")
        elif isinstance(node, ast.Attribute) and _names_a_run(node.value) and (
                node.attr in INSIDES or (node.attr.startswith("_") and not node.attr.startswith("__"))):
            found.append(f"{where}:{node.lineno}: {ast.unparse(node)} reaches into a run")
        if _is_run(node) and id(node) not in called:
            found.append(f"{where}:{node.lineno}: `{ast.unparse(node)}` types a run as Run (use nbtrain.reader.RunReader)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip() == "Run":
            found.append(f"{where}:{node.lineno}: a string annotation 'Run' (use nbtrain.reader.RunReader)")
    return found


def test_the_readers_are_the_ones_the_design_names() -> None:
    names = {str(p.relative_to(PACKAGE)) for p in READERS}
    assert {"cli.py", "server/runs.py", "server/handlers.py", "widgets/monitor.py", "tracking/forwarder.py",
            "tracking/artifacts.py"} <= names


@pytest.mark.parametrize("path", READERS, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_reader_uses_the_read_interface_not_runs_insides(path: Path) -> None:
    assert _violations(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE.parent))) == []


def test_the_rule_catches_what_it_is_for() -> None:
    source = (
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from nbtrain.client import Run\n"
        "def f(run: Run, other: 'Run') -> list[client.Run]:\n"
        "    run.backend.cursor(run.handle)\n"
        "    self_run = run\n"
        "    self_run._watcher.view\n"
        "    Run(None, None).snapshot()\n"  # building a handle is allowed
        "    return [run.snapshot(refresh=False), run.facts().bundle_digest, run.__class__]\n"  # the interface is
    )
    found = "\n".join(_violations(source, "bad.py"))
    for expected in ("bad.py:4: `import Run`", "bad.py:5: `Run`", "bad.py:5: a string annotation", "bad.py:5: `client.Run`",
                     "bad.py:6: run.backend", "bad.py:6: run.handle", "bad.py:8: self_run._watcher"):
        assert expected in found, found
    assert ":9:" not in found and ":10:" not in found, found


def test_run_implements_the_read_interfaces() -> None:
    # the protocols are checked structurally by mypy where readers receive a Run; here: every member exists
    for protocol in (RunReader, TrackedRun):
        members = {n for n in vars(protocol) if not n.startswith("_")}
        for base in protocol.__mro__[1:]:
            members |= {n for n in vars(base) if not n.startswith("_") and base.__module__ == "nbtrain.reader"}
        assert members and all(hasattr(Run, name) for name in members), sorted(members - set(dir(Run)))


class _NoBackend:
    """A backend that answers nothing: any call but the watcher's cursor is I/O ``__repr__`` must not do."""

    name = "local"

    def cursor(self, handle: Any) -> object:
        return object()

    def __getattr__(self, name: str) -> NoReturn:
        raise AssertionError(f"__repr__ asked the backend ({name})")


def test_repr_does_no_io(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(tmp_path)
    record = RunRecord(run_id="quiet-000001", spec=JobSpec(name="quiet", nodes=2, procs_per_node=4),
                       bundle_digest="ab" * 32, backend="local", handle={"attempt": 0}, state="running")
    run = Run(record, store, _NoBackend())  # type: ignore[arg-type]

    def no_io(*args: Any, **kwargs: Any) -> NoReturn:
        raise AssertionError(f"__repr__ did I/O: {args!r}")

    for target, name in ((builtins, "open"), (io, "open"), (os, "open"), (os, "stat"), (os, "lstat"),
                         (os, "scandir"), (os, "listdir"), (Path, "read_text"), (Path, "read_bytes"),
                         (Path, "exists"), (Path, "is_file"), (Path, "stat"), (Store, "load"), (Store, "save")):
        monkeypatch.setattr(target, name, no_io)
    text = repr(run)
    assert text == "<Run quiet-000001 2x4 local: running>"


def test_facts_are_a_frozen_copy(tmp_path: Path) -> None:
    record = RunRecord(run_id="facts-000001", spec=JobSpec(name="facts"), bundle_digest="cd" * 32, backend="local",
                       notebook={"path": "/home/u/train.ipynb", "cell_id": "c1"})
    run = Run(record, Store(tmp_path), _NoBackend())  # type: ignore[arg-type]
    facts = run.facts()
    assert isinstance(facts, RunFacts) and facts.bundle_digest == "cd" * 32 and facts.tracking_run_id is None
    assert dict(facts.submitted_from) == {"path": "/home/u/train.ipynb", "cell_id": "c1"}
    with pytest.raises(TypeError):
        facts.submitted_from["path"] = "elsewhere"  # type: ignore[index]
    record.notebook["path"] = "moved.ipynb"
    assert facts.submitted_from["path"] == "/home/u/train.ipynb"
