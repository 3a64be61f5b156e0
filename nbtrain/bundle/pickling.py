"""objects.pkl: the captured objects that cannot be written as source.

Format: one pickle stream written by one pickler, read by one unpickler (so objects that share data
still share it on the worker, e.g. a model and the optimizer holding its parameters):

1. a list of names, then
2. one pickle per name, in that order.

Dumping each object separately measures what each name adds to the bundle. Classes and functions
that ship as *source* in main.py are written as persistent references (their name); main.py's loader
resolves them in its globals, so an instance of a notebook class unpickles to the class defined in
main.py and ``isinstance`` holds on the worker.

cloudpickle is imported on first use only.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nbtrain.errors import BundleTooLargeError, UnpicklableError

from .report import human_size

__all__ = ["PickledObjects", "pickle_objects"]


@dataclass(frozen=True)
class PickledObjects:
    """The objects.pkl bytes, each name's share, byte ranges, and the source names it refers to."""

    data: bytes
    sizes: Mapping[str, int]
    ranges: Mapping[str, tuple[int, int]]
    refs: frozenset[str]

    def owner_of(self, offset: int) -> str | None:
        """The name whose pickle holds byte ``offset`` (None: the header)."""
        for name, (start, end) in self.ranges.items():
            if start <= offset < end:
                return name
        return None


class _CappedSink:
    """File-like sink that keeps bytes up to ``cap`` and then only counts them."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.size = 0
        self.chunks: list[bytes] = []

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        self.size += n
        if self.size <= self.cap:
            self.chunks.append(bytes(data))
        return n


def pickle_objects(objects: Mapping[str, Any], by_source: Mapping[int, str], *, max_bytes: int) -> PickledObjects:
    """Pickle ``objects`` (name -> value) into the objects.pkl format.

    ``by_source`` maps ``id(obj)`` of objects that ship as source to their name in main.py.
    Raises :class:`UnpicklableError` naming the first object that cannot be pickled, and
    :class:`BundleTooLargeError` when the stream exceeds ``max_bytes``.
    """
    import pickle

    import cloudpickle

    refs: set[str] = set()

    class _Pickler(cloudpickle.Pickler):
        def persistent_id(self, obj: Any) -> str | None:
            name = by_source.get(id(obj))
            if name is not None:
                refs.add(name)
            return name

    sink = _CappedSink(max_bytes)
    # Without source definitions there is nothing to refer to: skip the per-object Python callback.
    pickler_class = _Pickler if by_source else cloudpickle.Pickler
    pickler = pickler_class(sink, protocol=pickle.DEFAULT_PROTOCOL)
    pickler.dump(list(objects))
    sizes: dict[str, int] = {}
    ranges: dict[str, tuple[int, int]] = {}
    for name, value in objects.items():
        start = sink.size
        try:
            pickler.dump(value)
        except Exception as err:  # TypeError, PicklingError, AttributeError, RecursionError, ...
            raise _unpicklable(name, value, err) from err
        sizes[name] = sink.size - start
        ranges[name] = (start, sink.size)
    if sink.size > max_bytes:
        raise _too_large(sink.size, max_bytes, sizes)
    return PickledObjects(b"".join(sink.chunks), sizes, ranges, frozenset(refs))


def _unpicklable(name: str, value: Any, err: BaseException) -> UnpicklableError:
    kind = type(value)
    where = kind.__qualname__
    if kind.__module__ not in ("builtins", "__main__"):
        where = f"{kind.__module__}.{where}"
    return UnpicklableError(
        f"Cannot send {name!r} (a {where}) to the workers: it can be neither written as source nor "
        f"pickled ({type(err).__name__}: {err}). Objects such as locks, open files, sockets, "
        f"generators and live connections only exist in this process. Create {name!r} inside the "
        f"cell, or in a function the cell calls, so each worker makes its own."
    )


def _too_large(total: int, cap: int, sizes: Mapping[str, int]) -> BundleTooLargeError:
    biggest = heapq.nlargest(3, sizes.items(), key=lambda item: item[1])
    listed = ", ".join(f"{name} ({human_size(size)})" for name, size in biggest)
    return BundleTooLargeError(
        f"The captured objects take {human_size(total)} ({total} bytes) pickled, over the cap of "
        f"{human_size(cap)} ({cap} bytes). Biggest: {listed}. Load the data inside the cell (from a "
        f"file, a dataset library or object storage) instead of capturing it, or raise the cap with "
        f"--max-capture-mb."
    )
