"""Writes the raw spool as records arrive, so memory stays flat on long runs.

Records collect in a small in-memory batch between drains; each drain writes
one `Batch` frame straight to the file (one write(2), no user-space buffer),
so a runner killed with SIGKILL loses only the records it had not drained
yet: those still in the ring buffer and the batch of the drain in progress
(docs/architecture.md, "The raw spool"). The spool is written to
`<name>.partial` and renamed when its trailer is in, so a spool without the
suffix is always complete. Both names live in the `--out` directory the
runner opened once (spool/dirfd.py): the partial file is created with
O_EXCL|O_NOFOLLOW, and before it is renamed the runner checks that the name
still holds the file it wrote, so a spool swapped in during the run is
refused rather than normalized.

A write that fails (ENOSPC, EDQUOT, EIO) never leaves a torn frame: the file
is cut back to the end of the last whole frame, and from then on records are
counted, not written. The run goes on (the command is not killed for a full
disk); `finish` then refuses to publish and the partial spool stays, whole
frame by whole frame, for `spool.recover`.
"""

from __future__ import annotations

import contextlib
import os
import time

from spool.dirfd import SPOOL_MODE, append_to, create_new_fd, remove_within, rename_within, same_file
from spool.format import Batch, Frame, Phase, SdkMessage, SpoolHeader, SpoolTrailer, batch_head, encode_frame


class SpoolReplaced(RuntimeError):
    """The spool's name no longer holds the file the runner wrote."""


class SpoolWriteFailed(RuntimeError):
    """A write to the spool failed; the partial spool holds the whole frames before it."""

    def __init__(self, error: OSError, unwritten: int) -> None:
        super().__init__(f"{error.strerror or error}")
        self.error = error
        self.unwritten = unwritten


class Spooler:
    """Append-only spool writer with per-drain batches."""

    def __init__(self, dir_fd: int, name: str, header: SpoolHeader) -> None:
        self.dir_fd = dir_fd
        self.name = name
        self._partial = name + ".partial"
        self._fd = create_new_fd(dir_fd, self._partial, SPOOL_MODE)
        self._size = 0
        self._pending: list[bytes] = []
        self.records = 0
        self.stamps: dict[str, int] = {}
        """Each phase marker's time as written (CLOCK_MONOTONIC ns)."""
        self.failure: OSError | None = None
        """The first write error; nothing is written after it."""
        self.unwritten = 0
        """Records drained after `failure`, which the spool does not hold."""
        self._write(encode_frame(header))
        if self.failure is not None:  # not even the header fits: nothing worth keeping
            self.discard()
            raise self.failure

    @property
    def partial_name(self) -> str:
        return self._partial

    @property
    def size(self) -> int:
        """Bytes of whole frames written so far: what a concurrent reader may read (spool/tail.py)."""
        return self._size

    def reader_fd(self) -> int:
        """A read-only descriptor of this spool file (the inode written here, whatever its name
        becomes), for reading it while it is written (spool/tail.py); the caller closes it."""
        return os.open(f"/proc/self/fd/{self._fd}", os.O_RDONLY | os.O_CLOEXEC)

    def _write(self, data: bytes, records: int = 0) -> None:
        """Write one whole frame, or none of it (the file is cut back on failure)."""
        if self.failure is not None:
            self.unwritten += records
            return
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError as exc:
            self.failure = exc
            self.unwritten += records
            with contextlib.suppress(OSError):  # freeing blocks works on a full disk
                os.ftruncate(self._fd, self._size)
            return
        self._size += len(data)
        self.records += records

    def add(self, record: bytes) -> None:
        """Sink for the monitor: one raw record."""
        self._pending.append(record)

    def add_batch(self, items: bytes, count: int) -> None:
        """Sink for the C ring consumer: `count` records already encoded as the msgpack
        items of a Batch's `records` array (ebpf/ringsink.c), written as one Batch frame."""
        self.flush()
        self._write(batch_head(count, len(items)) + items, count)  # one whole frame (at most 1 MiB)

    def flush(self) -> int:
        """Write pending records as one batch; returns how many were drained."""
        count = len(self._pending)
        if count:
            self._write(encode_frame(Batch(records=self._pending)), count)
            self._pending = []
        return count

    def sdk(self, messages: list[SdkMessage]) -> None:
        """Write SDK channel messages (already stamped on receipt)."""
        for message in messages:
            self._write(encode_frame(message))

    def phase(self, name: str) -> None:
        """Stamp a runner phase marker on the runner clock."""
        self.flush()
        self.stamps[name] = time.monotonic_ns()
        self._write(encode_frame(Phase(name=name, ts=self.stamps[name])))

    def finish(self, trailer: SpoolTrailer, sync: bool = True) -> str:
        """Write the trailer, sync (unless a staging copy), and publish the spool under its final name.

        Raises SpoolReplaced when the partial name holds another file than the
        one written here (someone swapped it during the run), and
        SpoolWriteFailed when a write failed: the partial spool is then kept
        as it is (whole frames only) and the caller says so.
        """
        self.flush()
        self._write(encode_frame(trailer))
        if self.failure is None and sync:
            with contextlib.suppress(OSError):
                os.fsync(self._fd)
        if self.failure is not None:
            os.close(self._fd)
            raise SpoolWriteFailed(self.failure, self.unwritten)
        try:
            if not same_file(self._fd, self.dir_fd, self._partial):
                raise SpoolReplaced(f"{self._partial} was replaced during the run")
            rename_within(self.dir_fd, self._partial, self.name)
            if not same_file(self._fd, self.dir_fd, self.name):
                remove_within(self.dir_fd, self.name)  # not ours: never leave it as the run's spool
                raise SpoolReplaced(f"{self.name} was replaced while it was published")
        finally:
            os.close(self._fd)
        return self.name

    @staticmethod
    def append(dir_fd: int, name: str, frame: Frame) -> None:
        """Add a frame to a published spool (frames after the trailer are fine)."""
        with append_to(dir_fd, name) as f:
            f.write(encode_frame(frame))
            f.flush()
            os.fsync(f.fileno())

    def discard(self) -> None:
        """Drop an unfinished spool."""
        with contextlib.suppress(OSError):
            os.close(self._fd)
        remove_within(self.dir_fd, self._partial)
