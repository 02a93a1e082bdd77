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

When a chunk is spilled, stage A also works out what stage B would for its
distinct shapes (`prepare`: normalizer/collector.py `Prepared`): their
kernel-line tails, in one block with each one's span, stored with the
chunk. Stage B can then write the chunk's lines by index (`Spilled`),
without reading its shapes back.
"""

from __future__ import annotations

import os
import tempfile
from array import array
from collections.abc import Callable, Hashable, Iterator

import msgspec

from normalizer import accel
from normalizer.classify import Classified

Run = tuple[list[Classified], list[int]]
"""Shapes, one per event, and their `(order, ts)` pairs flattened (twice as long)."""

Ahead = tuple[bytes, bytes, bytes]
"""A chunk's distinct shapes worked out ahead: their kernel-line tails in one block, each one's
(start, end) in it (u64 pairs), and the positions (u64s) of those left to stage B (their span
is empty)."""
Prepare = Callable[[list[Classified]], Ahead]

_encode = msgspec.msgpack.Encoder().encode
_chunk = msgspec.msgpack.Decoder(tuple[bytes, bytes, bytes, bytes | None, bytes | None, bytes | None])
_table = msgspec.msgpack.Decoder(list[Classified])


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


class Spilled:
    """One spilled chunk of a thread's evidence, read back. `run()` decodes its shapes and pairs;
    `indexes` (u64 per event: its shape's position in `table()`) with `ahead` (when stage A
    prepared the chunk) give its lines without them."""

    __slots__ = ("_pairs", "_table", "ahead", "indexes")

    def __init__(self, data: bytes) -> None:
        self._table, self.indexes, self._pairs, tails, spans, pending = _chunk.decode(data)
        self.ahead: Ahead | None = None if tails is None or spans is None or pending is None \
            else (tails, spans, pending)

    def table(self) -> list[Classified]:
        """The chunk's distinct shapes (new objects each time)."""
        return _table.decode(self._table)

    @property
    def events(self) -> int:
        return len(self.indexes) // 8

    def pairs(self) -> array[int]:
        """The chunk's (order, ts) pairs, flattened."""
        pairs = array("Q")
        pairs.frombytes(self._pairs)
        return pairs

    def run(self) -> Run:
        """The chunk as a run: shapes (one object per distinct shape) and pairs."""
        table = self.table()
        index = array("Q")
        index.frombytes(self.indexes)
        return list(map(table.__getitem__, index)), self.pairs().tolist()


class ThreadBuckets:
    """Per-thread evidence; `held` and `room` are read by the scan's loop, which files inline."""

    def __init__(self, limit: int, prepare: Prepare | None = None) -> None:
        self._limit = limit
        self._prepare = prepare
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
            ahead = self._prepare(table) if self._prepare is not None else (None, None, None)
            data = _encode((_encode(table), indexes, array("Q", pairs).tobytes(), *ahead))
            self._chunks.setdefault(thread, []).append((self._spill.tell(), len(data)))
            self._spill.write(data)
        self.held.clear()
        self.room = self._limit

    def pieces(self, thread: Hashable) -> Iterator[Spilled | Run]:
        """A thread's evidence in its own order: its spilled chunks, then its held run."""
        for offset, size in self._chunks.get(thread, ()):
            self._spill.seek(offset)
            yield Spilled(self._spill.read(size))
        run = self.held.get(thread)
        if run is not None:
            yield run

    def runs(self, thread: Hashable) -> Iterator[Run]:
        """A thread's evidence in its own order, as runs (a chunk of shapes shares their objects)."""
        for piece in self.pieces(thread):
            yield piece.run() if isinstance(piece, Spilled) else piece

    def events(self, thread: Hashable) -> Iterator[Classified]:
        """A thread's evidence as whole events, in its own order."""
        for shapes, pairs in self.runs(thread):
            for i, shape in enumerate(shapes):
                yield full(shape, pairs[2 * i], pairs[2 * i + 1])

    def close(self) -> None:
        self._spill.close()
