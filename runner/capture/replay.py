"""A recorded spool as an `EventSource` (phases.py): the monitor's stand-in without BPF.

Each drain hands over the next batch of the spool's records, exactly as the
ring gave them to the runner that recorded it, and the counters are the
recording's trailer. Used to test the capture phases without root, and to
check that a capture passes every record through in order.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from spool.format import Batch, SpoolTrailer, iter_frames


class ReplaySource:
    """Replays `path`'s records, one recorded batch (or `per_drain` records) per `drain()`."""

    def __init__(self, path: Path, per_drain: int | None = None) -> None:
        with open(path, "rb") as f:
            frames = list(iter_frames(f))
        self._batches = [f.records for f in frames if isinstance(f, Batch)]
        if per_drain is not None:
            records = [r for batch in self._batches for r in batch]
            self._batches = [records[i:i + per_drain] for i in range(0, len(records), per_drain)]
        trailer = next(f for f in frames if isinstance(f, SpoolTrailer))
        self._drops, self._emitted = dict(trailer.drops), dict(trailer.emitted)
        self._sink: Callable[[bytes], None] | None = None

    @property
    def remaining(self) -> int:
        """Batches not handed over yet."""
        return len(self._batches)

    def set_sink(self, sink: Callable[[bytes], None]) -> None:
        self._sink = sink

    def wait(self, timeout_ms: int, wake: int | None = None) -> None:
        """Records are always ready; nothing to wait for."""

    def drain(self) -> None:
        if not self._batches:
            return
        if self._sink is None:
            raise RuntimeError("drain before set_sink: records would be lost")
        for record in self._batches.pop(0):
            self._sink(record)

    def finish(self) -> None:
        """The final drain: as the recording's, one more batch."""
        self.drain()

    def drops(self) -> dict[str, int]:
        return self._drops

    def emitted(self) -> dict[str, int]:
        return self._emitted
