"""Evidence filed per thread in the thread's own order, spilled to disk past a limit.

Canonical order needs the whole tree (numbers are known only at the end), so
evidence waits here; spilling keeps memory flat however long the run was.

An event is held compactly: its *shape* (a `Classified` with `order` and `ts`
zero: kind, value, open metadata, denial), shared by every event of that
shape, and its `(order, ts)` pair in a flat list of ints. The scan
(normalizer/scan.py) hands the same shape object for every repeat of an event,
so a held event costs three list slots and two ints, and a spilled chunk
stores each distinct shape once, then an index and a pair per event as
arrays of u64.
"""

from __future__ import annotations

import os
import tempfile
from array import array
from collections.abc import Hashable, Iterator

import msgspec

from normalizer import accel
from normalizer.classify import Classified

Run = tuple[list[Classified], list[int]]
"""Shapes, one per event, and their `(order, ts)` pairs flattened (twice as long)."""

_encode = msgspec.msgpack.Encoder().encode
_chunk = msgspec.msgpack.Decoder(tuple[list[Classified], bytes, bytes])


def index_shapes(shapes: list[Classified]) -> tuple[list[Classified], bytes]:
    """The distinct objects of `shapes` by identity, in first-seen order, and each item's
    position in that table as native u64s (the C accelerator has the same function)."""
    ids = list(map(id, shapes))
    distinct = dict(zip(ids, shapes, strict=True))
    index = dict(zip(distinct, range(len(distinct)), strict=True))
    return list(distinct.values()), array("Q", map(index.__getitem__, ids)).tobytes()


def shape_of(c: Classified) -> Classified:
    """`c` without its position and capture time: what events of one shape share."""
    return msgspec.structs.replace(c, order=0, ts=0) if c.order or c.ts else c


def full(shape: Classified, order: int, ts: int) -> Classified:
    """The event a held shape and pair stand for."""
    return msgspec.structs.replace(shape, order=order, ts=ts)


class ThreadBuckets:
    """Per-thread evidence; `held` and `room` are read by the scan's loop, which files inline."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self.room = limit
        """Events that may still be filed before the held ones must be spilled."""
        self.held: dict[Hashable, Run] = {}
        self._chunks: dict[Hashable, list[tuple[int, int]]] = {}
        self._spill = tempfile.TemporaryFile(prefix="assay-normalize-")  # noqa: SIM115 - closed by close()

    def open(self, thread: Hashable) -> Run:
        """The held run of `thread`, made empty when it has none."""
        run = self.held.get(thread)
        if run is None:
            run = self.held[thread] = ([], [])
        return run

    def add(self, thread: Hashable, shape: Classified, order: int, ts: int) -> None:
        """File one event of `thread` (the scan does the same inline on its hot path)."""
        shapes, pairs = self.open(thread)
        shapes.append(shape)
        pairs.append(order)
        pairs.append(ts)
        self.room -= 1
        if self.room <= 0:
            self.spill()

    def spill(self) -> None:
        """Write every held run to the spill file as a chunk: distinct shapes once, then indexes."""
        self._spill.seek(0, os.SEEK_END)
        index = accel.native.index_shapes if accel.native else index_shapes
        for thread, (shapes, pairs) in self.held.items():
            table, indexes = index(shapes)
            data = _encode((table, indexes, array("Q", pairs).tobytes()))
            self._chunks.setdefault(thread, []).append((self._spill.tell(), len(data)))
            self._spill.write(data)
        self.held.clear()
        self.room = self._limit

    def runs(self, thread: Hashable) -> Iterator[Run]:
        """A thread's evidence in its own order, as runs (a chunk of shapes shares their objects)."""
        for offset, size in self._chunks.get(thread, ()):
            self._spill.seek(offset)
            table, indexes, pair_bytes = _chunk.decode(self._spill.read(size))
            index, pairs = array("Q"), array("Q")
            index.frombytes(indexes)
            pairs.frombytes(pair_bytes)
            yield list(map(table.__getitem__, index)), pairs.tolist()
        run = self.held.get(thread)
        if run is not None:
            yield run

    def events(self, thread: Hashable) -> Iterator[Classified]:
        """A thread's evidence as whole events, in its own order."""
        for shapes, pairs in self.runs(thread):
            for i, shape in enumerate(shapes):
                yield full(shape, pairs[2 * i], pairs[2 * i + 1])

    def close(self) -> None:
        self._spill.close()
