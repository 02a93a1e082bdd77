"""`layers/kernel.ndjson`: one line per evidence event, encoded and written in bulk.

A line is `{"schema":..,"run_id":..,"seq":N,"pid":P,` followed by a tail that
depends only on the event's type, kind, value and open metadata. Agents repeat
those (the same files opened again and again), so the writer (normalizer/collector.py)
computes each distinct tail once (`KernelLines.tail`: the value encoded with
msgspec, spliced into a frame encoded once per type, kind and open metadata)
and splices the run's head, seq and pid in (`join_lines`, in C when the
accelerator is built); the bytes are exactly what encoding the whole
`KernelEvent` gives (tests/test_kernel_lines.py). Lines reach the temp file
and the digest in blocks of `LINES_PER_WRITE`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import chain, repeat
from typing import BinaryIO

import msgspec

from normalizer import accel
from normalizer.artifacts import KERNEL_EVENT_SCHEMA, KernelEvent
from normalizer.classify import Classified
from normalizer.deflate import Deflated, inflated
from normalizer.layer_digest import Digest, Pipeline

LINES_PER_WRITE = 4096
"""Kernel lines joined into one write and one digest update."""
MEMO_ENTRIES = 1 << 12
"""Distinct entries a memo holds before it is emptied: memory stays flat however long the run."""

_encoder = msgspec.json.Encoder()
_kernel_line = msgspec.json.Decoder(KernelEvent)


def kernel_event(run_id: str, seq: int, c: Classified, pid: int) -> KernelEvent:
    """The `layers/kernel.ndjson` line for one evidence event of process `pid`.

    Open metadata follows classify.open_meta: `return_value`/`status` only on
    a failed open, `operation_flags` only when non-empty (as upstream,
    kernel.rs:60) and consistent with Assay's derivation.
    """
    event = KernelEvent(
        schema=KERNEL_EVENT_SCHEMA,
        run_id=run_id,
        seq=seq,
        pid=pid,
        event_type=c.event_type,
        kind=c.kind,
        value=c.value,
    )
    m = c.meta
    if m is not None:
        event.flags = m.flags
        if m.mode is not None:
            event.mode = m.mode
        if m.resolve is not None:
            event.resolve = m.resolve
        if m.return_value is not None:
            event.return_value = m.return_value
        event.access_mode = m.access_mode
        if m.operation_flags:
            event.operation_flags = list(m.operation_flags)
        if m.status is not None:
            event.status = m.status
    return event


class KernelLayer:
    """`layers/kernel.ndjson`, swept, hashed and deflated as it is written
    (normalizer/layer_digest.py, on a worker thread for large layers).

    Only the deflated bytes are kept (a temp file that spills to disk past
    1 MiB, `layer_digest.IN_MEMORY_BYTES`): the archive writer splices them in instead of compressing the
    layer again, and `reader` inflates them. `end` (stage B's last step)
    lets the worker finish on its own; the first read of a result (`sha256`,
    `unredacted`, `deflated`, `reader`) waits for it and seals the layer.
    Nothing can be written after either.
    """

    def __init__(self) -> None:
        self._pipeline: Pipeline | None = Pipeline(Digest())
        self._digest: Digest | None = None
        self._deflated: Deflated | None = None
        self._pending: list[bytes] = []
        self.size = 0
        self.count = 0

    def write(self, event: KernelEvent) -> None:
        self.write_line(_encoder.encode(event) + b"\n")

    def write_line(self, line: bytes) -> None:
        """Append one encoded line (newline included); lines reach the digest in blocks."""
        self._writing()
        self._pending.append(line)
        self.size += len(line)
        self.count += 1
        if len(self._pending) >= LINES_PER_WRITE:
            self._flush()

    def write_block(self, block: bytes, lines: int) -> None:
        """Append `lines` whole encoded lines at once (the bulk writer's path)."""
        self._flush()
        self._writing().put(block)
        self.size += len(block)
        self.count += lines

    def _flush(self) -> None:
        if self._pending:
            block = b"".join(self._pending)
            self._pending.clear()
            self._writing().put(block)

    def _writing(self) -> Pipeline:
        if self._pipeline is None or self._pipeline.ended:
            raise RuntimeError("the kernel layer was sealed: nothing more can be written")
        return self._pipeline

    def end(self) -> None:
        """No more lines: the worker finishes the sweep, digest and deflate of what it holds while
        the writer goes on to the other members (stage B's last step; sealing does it too)."""
        if self._pipeline is not None and not self._pipeline.ended:
            self._flush()
            self._pipeline.end()

    def _sealed(self) -> Digest:
        if self._digest is None:
            self.end()
            assert self._pipeline is not None  # set until the digest is
            self._digest = self._pipeline.close()
            self._pipeline = None
        return self._digest

    @property
    def sha256(self) -> str:
        return self._sealed().sha.hexdigest()

    @property
    def unredacted(self) -> str | None:
        """The first rule a line still matches after redaction (the fail-closed sweep), or None."""
        return self._sealed().unredacted

    def deflated(self) -> Deflated:
        """The layer's bytes as a deflate segment (normalizer/deflate.py), read from the start."""
        if self._deflated is None:
            self._deflated = self._sealed().finish()
        self._deflated.data.seek(0)
        return self._deflated

    def reader(self) -> BinaryIO:
        """The layer's bytes from the start, inflated as read (shares the deflated file's
        position: read it before asking again)."""
        return inflated(self.deflated())

    def read_bytes(self) -> bytes:
        return self.reader().read()

    def events(self) -> list[KernelEvent]:
        """Decoded lines (for tests and small runs)."""
        return [_kernel_line.decode(line) for line in self.read_bytes().splitlines()]

    @classmethod
    def of(cls, events: Iterable[KernelEvent]) -> KernelLayer:
        layer = cls()
        for event in events:
            layer.write(event)
        return layer



def join_lines(head: bytes, seq: int, pid_part: bytes, tails: list[bytes]) -> bytes:
    """`head`, seq (counting up from `seq`), `pid_part` and the tail, for each tail, as one block.

    The C accelerator (normalizer/accel.py) has the same function; this is its fallback.
    """
    return b"".join(chain.from_iterable(zip(
        repeat(head), map(b"%d".__mod__, range(seq, seq + len(tails))), repeat(pid_part), tails)))


def join_indexed(head: bytes, seq: int, pid_part: bytes, tails: bytes, spans: bytes, indexes: bytes,
                 start: int, count: int) -> bytes:
    """`join_lines` of the tails that `indexes[start:start + count]` pick: tail `i` is
    `tails[spans[2 * i]:spans[2 * i + 1]]` (`spans` and `indexes` are native u64s: a spilled
    chunk prepared by stage A, normalizer/buckets.py). The C accelerator has the same function,
    which refuses an index or span out of bounds; this is its fallback."""
    cuts = memoryview(spans).cast("Q")
    picks = memoryview(indexes).cast("Q")[start:start + count]
    return join_lines(head, seq, pid_part, [tails[cuts[2 * i]:cuts[2 * i + 1]] for i in picks])


def shape_tails(shapes: list[Classified], values: list[str | None],
                frames: dict[tuple[int, str, object], tuple[bytes, bytes]],
                frame_of: Callable[[Classified], tuple[bytes, bytes]],
                encode: Callable[[str], bytes]) -> list[bytes]:
    """Each shape's tail with its value: the frame of its (type, kind, metadata), from `frames` or
    `frame_of`, with the value encoded (`encode`) spliced in for the frame's `null`.

    The C accelerator (normalizer/accel.py) has the same function, which
    writes printable ASCII without a quote or backslash between quotes
    itself (what msgspec writes for it) and calls `encode` for any other
    value; this is its fallback and reference.
    """
    out = []
    for c, value in zip(shapes, values, strict=True):
        frame = frames.get((c.event_type, c.kind, c.meta))
        before, after = frame if frame is not None else frame_of(c)
        out.append(before + after if value is None else before + encode(value) + after[4:])
    return out


class KernelLines:
    """Encodes the kernel lines of one run: a tail once per event shape, then seq and pid per line."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        probe = _encoder.encode(KernelEvent(schema=KERNEL_EVENT_SCHEMA, run_id=run_id, seq=0, pid=0,
                                            event_type=0, kind="openat", value=None))
        self.head = probe[:probe.index(b'"seq":0,"pid":0,')] + b'"seq":'
        """The bytes of every line before its seq number."""
        self._zero = self.head + b'0,"pid":0,'
        self._frames: dict[tuple[int, str, object], tuple[bytes, bytes]] = {}

    def tail(self, c: Classified, value: str | None) -> bytes:
        """Everything after `"pid":N,` of `c`'s line with (final, redacted) `value`, newline included.

        The tail is the encoded line of `c` with a null value, split around
        `"value":null`, with the value encoded on its own spliced in: msgspec
        writes a string the same alone as inside an object
        (tests/test_kernel_lines.py), so only the frame is memoized per
        (type, kind, open metadata), a handful per run.
        """
        return shape_tails([c], [value], self._frames, self.frame, _encoder.encode)[0]

    def tails(self, shapes: list[Classified], values: list[str | None]) -> list[bytes]:
        """`tail` of each shape with its value, in C when the accelerator is built (`shape_tails`)."""
        native = accel.native
        return (native.shape_tails if native else shape_tails)(shapes, values, self._frames, self.frame,
                                                               _encoder.encode)

    def frame(self, c: Classified) -> tuple[bytes, bytes]:
        """(`..."value":`, `null...` to the newline) of `c`'s tail, memoized per (type, kind, metadata)."""
        key = (c.event_type, c.kind, c.meta)
        frame = self._frames.get(key)
        if frame is None:
            frame = self._frame(c)
            if len(self._frames) >= MEMO_ENTRIES:
                self._frames.clear()
            self._frames[key] = frame
        return frame

    def _frame(self, c: Classified) -> tuple[bytes, bytes]:
        """(`..."value":`, `null...` to the newline) of `c`'s tail."""
        null = msgspec.structs.replace(c, value=None) if c.value is not None else c
        encoded = _encoder.encode(kernel_event(self.run_id, 0, null, 0))
        if not encoded.startswith(self._zero):
            raise RuntimeError("kernel line fields are not in the order the line writer expects")
        tail = encoded[len(self._zero):] + b"\n"
        cut = tail.index(b',"value":null') + len(b',"value":')
        return tail[:cut], tail[cut:]
