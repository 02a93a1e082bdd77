"""Writes the raw spool as records arrive, so memory stays flat on long runs.

Records collect in a small in-memory batch between drains; each drain writes
one `Batch` frame. The spool is written to `<name>.partial` and renamed when
its trailer is in, so a spool without the suffix is always complete. Both
names live in the `--out` directory the runner opened once (spool/dirfd.py):
the partial file is created with O_EXCL|O_NOFOLLOW, and before it is renamed
the runner checks that the name still holds the file it wrote, so a spool
swapped in during the run is refused rather than normalized.
"""

from __future__ import annotations

import os
import time

from spool.dirfd import append_to, create_new, remove_within, rename_within, same_file
from spool.format import Batch, Frame, Phase, SdkMessage, SpoolHeader, SpoolTrailer, batch_head, encode_frame


class SpoolReplaced(RuntimeError):
    """The spool's name no longer holds the file the runner wrote."""


class Spooler:
    """Append-only spool writer with per-drain batches."""

    def __init__(self, dir_fd: int, name: str, header: SpoolHeader) -> None:
        self.dir_fd = dir_fd
        self.name = name
        self._partial = name + ".partial"
        self._file = create_new(dir_fd, self._partial)
        self._pending: list[bytes] = []
        self.records = 0
        self._file.write(encode_frame(header))

    def add(self, record: bytes) -> None:
        """Sink for the monitor: one raw record."""
        self._pending.append(record)

    def add_batch(self, items: bytes, count: int) -> None:
        """Sink for the C ring consumer: `count` records already encoded as the msgpack
        items of a Batch's `records` array (ebpf/ringsink.c), written as one Batch frame."""
        self.flush()
        self._file.write(batch_head(count, len(items)))
        self._file.write(items)
        self.records += count

    def flush(self) -> int:
        """Write pending records as one batch; returns how many were written."""
        count = len(self._pending)
        if count:
            self._file.write(encode_frame(Batch(records=self._pending)))
            self._pending = []
            self.records += count
        return count

    def sdk(self, messages: list[SdkMessage]) -> None:
        """Write SDK channel messages (already stamped on receipt)."""
        for message in messages:
            self._file.write(encode_frame(message))

    def phase(self, name: str) -> None:
        """Stamp a runner phase marker on the runner clock."""
        self.flush()
        self._file.write(encode_frame(Phase(name=name, ts=time.monotonic_ns())))

    def finish(self, trailer: SpoolTrailer) -> str:
        """Write the trailer, sync, and publish the spool under its final name (returned).

        Raises SpoolReplaced when the partial name holds another file than the
        one written here: someone swapped it during the run.
        """
        self.flush()
        self._file.write(encode_frame(trailer))
        self._file.flush()
        os.fsync(self._file.fileno())
        try:
            if not same_file(self._file.fileno(), self.dir_fd, self._partial):
                raise SpoolReplaced(f"{self._partial} was replaced during the run")
            rename_within(self.dir_fd, self._partial, self.name)
            if not same_file(self._file.fileno(), self.dir_fd, self.name):
                remove_within(self.dir_fd, self.name)  # not ours: never leave it as the run's spool
                raise SpoolReplaced(f"{self.name} was replaced while it was published")
        finally:
            self._file.close()
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
        self._file.close()
        remove_within(self.dir_fd, self._partial)
