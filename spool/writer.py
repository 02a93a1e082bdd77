"""Writes the raw spool as records arrive, so memory stays flat on long runs.

Records collect in a small in-memory batch between drains; each drain writes
one `Batch` frame. The spool is written to `<name>.partial` and renamed when
its trailer is in, so a spool without the suffix is always complete.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from spool.format import Batch, Frame, Phase, SdkMessage, SpoolHeader, SpoolTrailer, encode_frame


class Spooler:
    """Append-only spool writer with per-drain batches."""

    def __init__(self, path: Path, header: SpoolHeader) -> None:
        self.path = path
        self._partial = path.with_name(path.name + ".partial")
        self._file = open(self._partial, "wb")  # noqa: SIM115 - closed in finish/discard
        self._pending: list[bytes] = []
        self.records = 0
        self._file.write(encode_frame(header))

    def add(self, record: bytes) -> None:
        """Sink for the monitor: one raw record."""
        self._pending.append(record)

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

    def finish(self, trailer: SpoolTrailer) -> Path:
        """Write the trailer, sync, and publish the spool under its final name."""
        self.flush()
        self._file.write(encode_frame(trailer))
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self._partial, self.path)
        return self.path

    @staticmethod
    def append(path: Path, frame: Frame) -> None:
        """Add a frame to a published spool (frames after the trailer are fine)."""
        with open(path, "ab") as f:
            f.write(encode_frame(frame))
            f.flush()
            os.fsync(f.fileno())

    def discard(self) -> None:
        """Drop an unfinished spool."""
        self._file.close()
        self._partial.unlink(missing_ok=True)
