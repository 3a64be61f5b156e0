"""objects.pkl: the captured objects that cannot be written as source.

Format: one pickle stream written by one pickler, read by one unpickler (so objects that share data
still share it on the worker, e.g. a model and the optimizer holding its parameters):

1. a list of names, then
2. one pickle per name, in that order.

Dumping each object separately measures what each name adds to the bundle. Before anything is pickled,
flat values whose pickled size is known from their length (bytes, str, bytearray, numpy arrays of plain
numbers) are checked against the cap, so a value far over it is refused without being copied. Open files
are refused wherever they sit (cloudpickle would ship a text file's whole contents). Classes and functions
that ship as *source* in main.py are written as persistent references (their name); main.py's loader
resolves them in its globals, so an instance of a notebook class unpickles to the class defined in
main.py and ``isinstance`` holds on the worker.

cloudpickle is imported on first use only.
"""

from __future__ import annotations

import heapq
import io
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

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


#: Open files: refused at capture (each worker must open its own). In-memory io.BytesIO/StringIO still ship.
_FILE_TYPES = (io.TextIOWrapper, io.BufferedReader, io.BufferedWriter, io.BufferedRandom, io.BufferedRWPair, io.FileIO)


class _OpenFile(Exception):
    """Raised from inside the pickler when it meets an open file (carries the file object)."""

    def __init__(self, handle: Any) -> None:
        super().__init__("open file")
        self.handle = handle


def pickle_objects(objects: Mapping[str, Any], by_source: Mapping[int, str], *, max_bytes: int) -> PickledObjects:
    """Pickle ``objects`` (name -> value) into the objects.pkl format.

    ``by_source`` maps ``id(obj)`` of objects that ship as source to their name in main.py.
    Raises :class:`UnpicklableError` naming the first object that cannot be pickled (an open file anywhere
    inside it included), and :class:`BundleTooLargeError` when the stream exceeds ``max_bytes`` (before
    pickling when the flat values alone exceed it).
    """
    import pickle
    from collections import ChainMap

    import cloudpickle

    _check_known_sizes(objects, max_bytes)
    refs: set[str] = set()

    def refuse_file(handle: Any) -> Any:
        if handle is sys.stdout or handle is sys.stderr:
            return getattr, (sys, "stdout" if handle is sys.stdout else "stderr")  # the worker's own stream
        raise _OpenFile(handle)

    class _Plain(cloudpickle.Pickler):
        # read when the pickler is created (the C pickler's rule): a class attribute, not set afterwards
        dispatch_table: ClassVar[ChainMap[Any, Any]] = ChainMap(
            dict.fromkeys(_FILE_TYPES, refuse_file), cloudpickle.Pickler.dispatch_table
        )

    class _Pickler(_Plain):
        def persistent_id(self, obj: Any) -> str | None:
            name = by_source.get(id(obj))
            if name is not None:
                refs.add(name)
            return name

    sink = _CappedSink(max_bytes)
    # Without source definitions there is nothing to refer to: skip the per-object Python callback.
    pickler_class = _Pickler if by_source else _Plain
    pickler = pickler_class(sink, protocol=pickle.DEFAULT_PROTOCOL)
    pickler.dump(list(objects))
    sizes: dict[str, int] = {}
    ranges: dict[str, tuple[int, int]] = {}
    for name, value in objects.items():
        start = sink.size
        try:
            pickler.dump(value)
        except _OpenFile as err:
            raise _open_file(name, value, err.handle) from None
        except Exception as err:  # TypeError, PicklingError, AttributeError, RecursionError, ...
            raise _unpicklable(name, value, err) from err
        sizes[name] = sink.size - start
        ranges[name] = (start, sink.size)
    if sink.size > max_bytes:
        raise _too_large(sink.size, max_bytes, sizes)
    return PickledObjects(b"".join(sink.chunks), sizes, ranges, frozenset(refs))


def _least_size(value: Any) -> int:
    """A lower bound of the bytes ``value`` takes pickled, known without pickling it (0: not known)."""
    kind = type(value)
    if kind in (bytes, bytearray, str):
        return len(value)  # a str pickles as UTF-8: at least one byte per character
    numpy = sys.modules.get("numpy")
    if numpy is not None and kind is numpy.ndarray:
        try:
            return 0 if value.dtype.hasobject else int(value.nbytes)  # object arrays pickle their items instead
        except Exception:  # noqa: BLE001 - a size estimate must never fail the capture
            return 0
    return 0


def _check_known_sizes(objects: Mapping[str, Any], max_bytes: int) -> None:
    """Refuse, before pickling, values whose size alone is over the cap (each distinct object counted once)."""
    seen: set[int] = set()
    sizes: dict[str, int] = {}
    for name, value in objects.items():
        if id(value) not in seen:
            seen.add(id(value))
            sizes[name] = _least_size(value)
    total = sum(sizes.values())
    if total > max_bytes:
        raise _too_large(total, max_bytes, sizes, at_least=True)


def _type_name(value: Any) -> str:
    kind = type(value)
    where = kind.__qualname__
    if kind.__module__ not in ("builtins", "__main__"):
        where = f"{kind.__module__}.{where}"
    return where


def _open_file(name: str, value: Any, handle: Any) -> UnpicklableError:
    what = f"an open file ({_type_name(handle)} {getattr(handle, 'name', '?')!r}, mode {getattr(handle, 'mode', '?')!r})"
    held = f"{name!r} is {what}" if value is handle else f"{name!r} (a {_type_name(value)}) holds {what}"
    return UnpicklableError(
        f"Cannot send {name!r} to the workers: {held}. An open file belongs to this process; pickling it "
        f"would copy its contents into the bundle, or fail on the worker. Open the file inside the cell (or in "
        f"a function the cell calls) so each worker opens its own, and pass its path instead."
    )


def _unpicklable(name: str, value: Any, err: BaseException) -> UnpicklableError:
    where = _type_name(value)
    return UnpicklableError(
        f"Cannot send {name!r} (a {where}) to the workers: it can be neither written as source nor "
        f"pickled ({type(err).__name__}: {err}). Objects such as locks, open files, sockets, "
        f"generators and live connections only exist in this process. Create {name!r} inside the "
        f"cell, or in a function the cell calls, so each worker makes its own."
    )


def _too_large(total: int, cap: int, sizes: Mapping[str, int], *, at_least: bool = False) -> BundleTooLargeError:
    biggest = heapq.nlargest(3, [item for item in sizes.items() if item[1]], key=lambda item: item[1])
    listed = ", ".join(f"{name} ({human_size(size)})" for name, size in biggest)
    return BundleTooLargeError(
        f"The captured objects take {'at least ' if at_least else ''}{human_size(total)} ({total} bytes) pickled, "
        f"over the cap of "
        f"{human_size(cap)} ({cap} bytes). Biggest: {listed}. Load the data inside the cell (from a "
        f"file, a dataset library or object storage) instead of capturing it, or raise the cap with "
        f"--max-capture-mb."
    )
