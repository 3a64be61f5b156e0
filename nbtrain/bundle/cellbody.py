"""Text-level handling of the cell body: parsing with cell line numbers, and the edits main.py needs.

The body keeps its own text (comments, blank lines, formatting) in main.py; the only edits are made on
the text, line-count preserving, so "cell line N" maps to a fixed line of main.py:

- ``from __future__`` imports move to the top of main.py (their lines become comments);
- a final expression statement becomes ``__nbtrain_result__ = (<expression>)`` unless it ends in ``;``
  (IPython's way to say "no output").
"""

from __future__ import annotations

import ast
import functools
import io
from collections.abc import Callable
from dataclasses import dataclass

from nbtrain.errors import CaptureError, CellSyntaxError

from .reader import RESULT_NAME

__all__ = [
    "RESULT_NAME",
    "CellBody",
    "parse_source",
    "prepare_cell_body",
    "remove_lines",
    "require_code",
    "split_lines",
]


@dataclass(frozen=True)
class CellBody:
    """The cell as it appears in main.py: ``future`` import statements and the edited ``text``."""

    future: tuple[str, ...]
    text: str
    has_result: bool


def split_lines(text: str) -> list[str]:
    """Split like the Python tokenizer does (``\\n``, ``\\r\\n``, ``\\r``), keeping line ends."""
    return io.StringIO(text, newline="").readlines()


def parse_source(source: str, *, line_offset: int, what: str = "cell") -> ast.Module:
    """Parse and compile-check ``source``; raise :class:`CellSyntaxError` with the user's line numbers.

    ``line_offset`` is added to the parser's line number (``what`` names the place, e.g. "cell").
    Compiling catches what the parser alone accepts but Python refuses (``return`` outside a function,
    top-level ``await``, a misplaced ``from __future__``).
    """
    try:
        tree = ast.parse(source, filename=f"<{what}>")
        compile(tree, f"<{what}>", "exec", dont_inherit=True)
    except SyntaxError as err:
        raise _cell_syntax_error(err, source, line_offset, what) from None
    return tree


def require_code(tree: ast.Module, what: str = "cell") -> None:
    """Refuse (:class:`CaptureError`) a body without a single statement: empty, blank or only comments."""
    if not tree.body:
        raise CaptureError(
            f"The {what} has no code (it is empty, or only blank lines and comments): there is nothing for the gang "
            f"to run. Write the training code below the %%distributed line."
        )


def _cell_syntax_error(err: SyntaxError, source: str, line_offset: int, what: str) -> CellSyntaxError:
    lines = split_lines(source)
    body_line = err.lineno or 1
    text = err.text if err.text is not None else (lines[body_line - 1] if body_line <= len(lines) else "")
    text = text.rstrip("\r\n").expandtabs()
    user_line = body_line + line_offset
    caret = ""
    if err.offset and err.offset > 0:
        caret = "\n    " + " " * (min(err.offset, len(text) + 1) - 1) + "^"
    message = (
        f"Syntax error in {what} line {user_line}: {err.msg}\n    {text}{caret}\n"
        f"Fix that line and run the {what} again (nothing was submitted)."
    )
    exc = CellSyntaxError(message)
    exc.filename = f"<{what}>"
    exc.lineno = user_line
    exc.offset = err.offset
    exc.text = text
    return exc


def prepare_cell_body(cell: str, tree: ast.Module) -> CellBody:
    """Return the body for main.py: future imports lifted out, the last expression captured."""
    lines = split_lines(cell)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n"
    future: list[str] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            future.append(ast.unparse(stmt))
            rest = _rest_of_line(lines, stmt).strip()
            alone = not rest or rest.startswith("#")
            note = "pass  # (this __future__ import is at the top of main.py)" if alone else "pass"
            _replace_segment(lines, stmt, functools.partial(_constant, note))
        elif not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            break  # future imports may only follow a docstring
    has_result = False
    last = tree.body[-1] if tree.body else None
    if isinstance(last, ast.Expr) and not _suppressed(lines, last):
        _replace_segment(lines, last, lambda seg: f"{RESULT_NAME} = ({seg})")
        has_result = True
    return CellBody(tuple(future), "".join(lines), has_result)


def _constant(text: str, _segment: str) -> str:
    return text


def _rest_of_line(lines: list[str], stmt: ast.stmt) -> str:
    """The text after ``stmt`` on its last line."""
    assert stmt.end_lineno is not None and stmt.end_col_offset is not None
    return lines[stmt.end_lineno - 1].encode()[stmt.end_col_offset :].decode()


def _suppressed(lines: list[str], stmt: ast.stmt) -> bool:
    """True when the statement is followed by ``;`` on its last line (IPython: "no output")."""
    return _rest_of_line(lines, stmt).lstrip().startswith(";")


def _replace_segment(lines: list[str], node: ast.stmt, make: Callable[[str], str]) -> None:
    """Replace the exact text of ``node`` in ``lines`` by ``make(text)`` (line count preserved).

    ``make`` must not add or remove newlines. Offsets are UTF-8 byte offsets, as ``ast`` reports them.
    """
    assert node.end_lineno is not None and node.end_col_offset is not None
    first, last = node.lineno - 1, node.end_lineno - 1
    chunk = "".join(lines[first : last + 1]).encode()
    tail = len(lines[last].encode()) - node.end_col_offset
    segment = chunk[node.col_offset : len(chunk) - tail].decode()
    new = chunk[: node.col_offset].decode() + make(segment) + chunk[len(chunk) - tail :].decode()
    replacement = split_lines(new)
    if len(replacement) == last - first + 1:
        lines[first : last + 1] = replacement
    else:  # a multi-line statement replaced by one line: keep the numbering with empty lines
        lines[first : last + 1] = replacement + ["\n"] * (last - first + 1 - len(replacement))


def remove_lines(source: str, spans: list[tuple[int, int]]) -> str:
    """Drop the 1-based inclusive line ``spans`` from ``source`` (used to strip decorators)."""
    drop = {n for start, end in spans for n in range(start, end + 1)}
    return "".join(line for n, line in enumerate(split_lines(source), 1) if n not in drop)
