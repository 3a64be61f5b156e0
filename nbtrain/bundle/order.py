"""Order of the definitions (and the objects.pkl loader) in main.py.

Hard constraints ("eager" edges): a definition comes after what it needs when it *runs*: its
decorators, base classes, default values and class-body names. The objects.pkl loader is one node: it
comes after the definitions the pickle refers to, and before definitions that need a pickled object
when they run (``def f(x, device=DEVICE)`` with a pickled ``DEVICE``).

Soft preference: callees before callers (a depth-first post-order over every edge, function bodies
included), so main.py reads bottom-up like most notebooks. Cycles through function bodies are fine; a
cycle of hard edges (which Python itself could not run) falls back to the preference order.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

__all__ = ["OBJECTS", "order_nodes"]

#: Pseudo-node for the objects.pkl loader block.
OBJECTS = "<objects.pkl>"


def order_nodes(
    names: Sequence[str],
    eager: Mapping[str, Sequence[str]],
    lazy: Mapping[str, Sequence[str]],
) -> list[str]:
    """Return ``names`` ordered so every node follows its ``eager`` dependencies where possible.

    ``names`` is in discovery order (used for ties); dependencies outside ``names`` are ignored.
    ``OBJECTS``, when present in ``names``, goes as late as its dependents allow.
    """
    nodes = set(names)
    hard = {n: [d for d in eager.get(n, ()) if d in nodes and d != n] for n in names}
    soft = {n: [d for d in lazy.get(n, ()) if d in nodes and d != n] for n in names}

    preference: dict[str, int] = {}
    visiting: set[str] = set()

    def visit(start: str) -> None:
        # Iterative DFS post-order (deep dependency chains must not hit the recursion limit).
        stack: list[tuple[str, list[str]]] = [(start, [*hard[start], *soft[start]])]
        visiting.add(start)
        while stack:
            node, todo = stack[-1]
            while todo:
                nxt = todo.pop(0)
                if nxt not in preference and nxt not in visiting:
                    visiting.add(nxt)
                    stack.append((nxt, [*hard[nxt], *soft[nxt]]))
                    break
            else:
                stack.pop()
                visiting.discard(node)
                preference[node] = len(preference)

    for name in names:
        if name not in preference and name != OBJECTS:
            visit(name)
    if OBJECTS in nodes and OBJECTS not in preference:
        preference[OBJECTS] = len(preference)
    # The loader goes as late as possible: rank it after everything not forced behind it.
    if OBJECTS in nodes:
        preference[OBJECTS] += len(names)

    indegree = {n: len(hard[n]) for n in names}
    dependents: dict[str, list[str]] = {n: [] for n in names}
    for n in names:
        for d in hard[n]:
            dependents[d].append(n)
    ready = [(preference[n], n) for n in names if indegree[n] == 0]
    heapq.heapify(ready)
    ordered: list[str] = []
    while ready:
        _, node = heapq.heappop(ready)
        ordered.append(node)
        for dep in dependents[node]:
            indegree[dep] -= 1
            if indegree[dep] == 0:
                heapq.heappush(ready, (preference[dep], dep))
    if len(ordered) < len(names):  # a cycle of hard edges: keep the preference order for the rest
        placed = set(ordered)
        ordered += sorted((n for n in names if n not in placed), key=preference.__getitem__)
    return ordered
