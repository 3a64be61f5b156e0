"""Plain values written as Python source (``HIDDEN = 64``) instead of being pickled.

A value is *plain* when it is built only from ``None``, ``bool``, ``int``, ``float``, ``complex``,
``str``, ``bytes`` and exact ``list``/``tuple``/``dict``/``set``/``frozenset`` of those (no subclasses,
no cycles). The text is deterministic: set elements are sorted by their text, so the same value gives
the same bytes in every process (string hashing is randomised per process).
"""

from __future__ import annotations

import ast
import math
from typing import Any

__all__ = ["literal_source"]

_SCALARS = (bool, int, str, bytes, type(None))


class _NotPlain(Exception):
    pass


class _State:
    """Containers being rendered (cycle check) and characters left before giving up."""

    def __init__(self, budget: int) -> None:
        self.active: set[int] = set()
        self.left = budget

    def spend(self, text: str) -> str:
        self.left -= len(text) + 2  # + separator
        if self.left < -2:
            raise _NotPlain  # too long: stop early instead of rendering a huge list
        return text


def literal_source(value: Any, max_chars: int) -> str | None:
    """Return source text that evaluates to ``value``, or None if it is not plain or too long.

    The text round-trips through :func:`ast.literal_eval`, except for non-finite floats, written as
    ``float('inf')`` / ``float('nan')``, and frozensets, written as ``frozenset({...})``.
    """
    try:
        text = _render(value, _State(max_chars))
    except (_NotPlain, ValueError, RecursionError):  # ValueError: int too large for str()
        return None
    if len(text) > max_chars:
        return None
    if "float(" not in text and "frozenset(" not in text:
        try:
            if ast.literal_eval(text) != value:
                return None
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
    return text


def _render(value: Any, state: _State) -> str:
    kind = type(value)
    if kind in (str, bytes) and len(value) + 2 > state.left:
        # repr() is at least len + 2 characters (up to 4x for bytes): refuse before building it, or a 200 MB value
        # costs up to 800 MB here just to learn it is too long.
        raise _NotPlain
    if kind in _SCALARS:
        return state.spend(repr(value))
    if kind is float:
        return state.spend(_float(value))
    if kind is complex:
        if not (math.isfinite(value.real) and math.isfinite(value.imag)):
            raise _NotPlain
        return state.spend(repr(value))
    if kind in (list, tuple, set, frozenset, dict):
        if id(value) in state.active:
            raise _NotPlain  # a cycle
        state.active.add(id(value))
        try:
            return _container(value, state)
        finally:
            state.active.discard(id(value))
    raise _NotPlain


def _float(value: float) -> str:
    if math.isnan(value):
        return "float('nan')"
    if math.isinf(value):
        return "float('inf')" if value > 0 else "-float('inf')"
    return repr(value)


def _container(value: Any, state: _State) -> str:
    kind = type(value)
    if kind is dict:
        items = [f"{_render(k, state)}: {_render(v, state)}" for k, v in value.items()]
        return "{" + ", ".join(items) + "}"
    parts = [_render(item, state) for item in value]
    if kind is list:
        return "[" + ", ".join(parts) + "]"
    if kind is tuple:
        return "(" + ", ".join(parts) + (",)" if len(parts) == 1 else ")")
    parts.sort()
    if kind is set:
        return "{" + ", ".join(parts) + "}" if parts else "set()"
    return "frozenset({" + ", ".join(parts) + "})" if parts else "frozenset()"
