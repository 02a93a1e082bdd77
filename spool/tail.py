"""Reading a spool while the runner still writes it: whole frames only, in file order.

The runner normalizes a run as it goes (runner/capture/live.py): stage A of
the normalizer consumes the records while the command runs, so that little
is left once it exits. The reader follows the spool file through a
descriptor of its own and never decodes a frame that is not committed, so
it never sees a frame that is still being written, or one a failed write
cut back. Committed is what the writer reports (`Spooler.size`: whole
frames only, spool/writer.py) when the reader runs in the writer's process;
a reader in another process (runner/capture/live_child.py) cannot ask, and
takes the whole frames, by their length prefix, below the file's size. That
is the same set: the writer writes a frame front to back and counts it once
its last byte is written, so a frame whose bytes are all in the file is one
the writer counts (part of a write in progress may show; it is not decoded
until the rest is in); a write that fails is cut back before its frame is
whole, and nothing is written after it (spool/writer.py `_write`).
It stops at the trailer, the last frame the run writes; frames appended
after it (DAC verdicts) are not its business.

Memory is bounded by the read size and the largest frame: nothing is kept
but the small frames (header, phases, SDK messages).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator

from spool.format import (
    FRAME_HEAD,
    SPOOL_FORMAT,
    Batch,
    DacVerdicts,
    Frame,
    Phase,
    SdkMessage,
    Spool,
    SpoolError,
    SpoolHeader,
    SpoolTrailer,
    decode_frame,
    frame_size,
)

READ_BYTES = 4 << 20
"""Bytes read per pread: a few batches at a time."""
POLL_S = 0.01
"""How long the reader sleeps when the writer has nothing new."""


class TailCancelled(RuntimeError):
    """The run's capture failed: the spool will never be finished."""


class SpoolTail:
    """One pass over a growing spool: `records()` yields its raw records as they are committed.

    `fd` is a descriptor of the spool file (read with pread, so it may share
    its offset with the writer's); `committed()` is how many bytes of it are
    whole frames, by default the file's size (the frames are then cut by
    their length prefix: see above). The small frames are kept as they pass
    (`header`, `phases`, `sdk`, `trailer`).
    """

    def __init__(self, fd: int, committed: Callable[[], int] | None = None) -> None:
        self._fd = fd
        self._committed = committed or (lambda: os.fstat(fd).st_size)
        self._stop = threading.Event()
        self._more = threading.Event()
        self._frames = self._read_frames()
        self.header: SpoolHeader | None = None
        self.phases: list[Phase] = []
        self.sdk: list[SdkMessage] = []
        self.trailer: SpoolTrailer | None = None
        self.records_read = 0
        """Records handed on so far (those of a batch count once it is read)."""

    def cancel(self) -> None:
        """Stop waiting for frames: the reader raises TailCancelled at its next wait."""
        self._stop.set()
        self._more.set()

    def poke(self) -> None:
        """More has been committed (the trailer, say): read it now rather than at the next poll."""
        self._more.set()

    def read_header(self) -> SpoolHeader:
        """The spool's header, its first frame (waits for it)."""
        frame = next(self._frames, None)
        if not isinstance(frame, SpoolHeader):
            raise SpoolError("the spool does not start with a spool header")
        if frame.format != SPOOL_FORMAT:
            raise SpoolError(f"spool format {frame.format!r}, expected {SPOOL_FORMAT!r}")
        self.header = frame
        return frame

    def growing(self, records: Iterable[bytes]) -> Spool:
        """The spool as stage A reads it while it grows: the header (read first if need be), `records`
        (this tail's, perhaps wrapped) and the small frames seen so far, which fill in as it is read."""
        header = self.header or self.read_header()
        # no trailer while the spool grows: stage A never reads it (finished() has it for stage B)
        return Spool(header=header, records=records, phases=self.phases, trailer=None,  # type: ignore[arg-type]
                     sdk=self.sdk)

    def finished(self) -> Spool:
        """The spool's small frames once its records have all been read (stage B needs no records)."""
        if self.header is None or self.trailer is None:
            raise SpoolError("the spool's records have not all been read: no trailer yet")
        return Spool(header=self.header, records=(), phases=self.phases, trailer=self.trailer, sdk=self.sdk)

    def records(self) -> TailRecords:
        """The records after the header, in ring order, until the trailer has been read:
        iterate it for one record at a time, or call `batches()` for one list per spool Batch."""
        return TailRecords(self)

    def batches(self) -> Iterator[list[bytes]]:
        """The records after the header, one list per Batch frame, until the trailer has been read."""
        if self.header is None:
            self.read_header()
        for frame in self._frames:
            if isinstance(frame, Batch):
                self.records_read += len(frame.records)
                yield frame.records
            elif isinstance(frame, Phase):
                self.phases.append(frame)
            elif isinstance(frame, SdkMessage):
                self.sdk.append(frame)
            elif isinstance(frame, SpoolTrailer):
                self.trailer = frame
                return
            elif isinstance(frame, DacVerdicts):
                raise SpoolError("DAC verdicts before the trailer: not a spool the runner wrote")
            else:
                raise SpoolError("a second spool header")
        raise SpoolError("the spool ended without a trailer")

    def _read_frames(self) -> Iterator[Frame]:
        """Whole frames in file order, waiting for the writer; ends never (the caller stops)."""
        offset = 0  # file offset of `pending`'s first byte
        pending = b""
        while True:
            end = self._committed()
            start = offset + len(pending)
            if start >= end:
                if self._stop.is_set():
                    raise TailCancelled("the capture ended without a spool trailer")
                self._more.wait(POLL_S)
                self._more.clear()
                continue
            pending += os.pread(self._fd, min(end - start, READ_BYTES), start)
            view = memoryview(pending)
            pos = 0
            while len(view) - pos >= FRAME_HEAD:
                size = frame_size(view[pos:pos + FRAME_HEAD])
                if len(view) - pos - FRAME_HEAD < size:
                    break
                body = view[pos + FRAME_HEAD:pos + FRAME_HEAD + size]
                pos += FRAME_HEAD + size
                yield decode_frame(body)
            offset += pos
            pending = bytes(view[pos:])


class TailRecords:
    """A tail's records, read once: iterable record by record, and `batches()` (one list per
    Batch frame) for a normalizer that walks the spool batch by batch."""

    def __init__(self, tail: SpoolTail) -> None:
        self._tail = tail

    def __iter__(self) -> Iterator[bytes]:
        for batch in self._tail.batches():
            yield from batch

    def batches(self) -> Iterator[list[bytes]]:
        return self._tail.batches()
