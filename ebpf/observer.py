"""The observer: the one reader of the sensor's ring buffer, demultiplexing by run key.

Every record's header carries the key of the run whose task it is about
(`struct assay_hdr.run`, ebpf/wire.py `RUN_OFFSET`), so one reader can hand
each record to its run's sink, in ring order, without looking at anything
else. This is the Python reader, one callback per record; the C consumer
(ebpf/ringsink.c, docs/architecture.md "Reading the ring") does the same
dispatch in C and is used whenever it is built (unless
`ASSAY_RUNNER_RING_CONSUMER=python`). The sink interface is small so either
can serve the runs:

- `open_run(key, sink)` before the run's first task is tracked
  (`Monitor.add_run`), `close_run(key)` after its last record was handed on;
- a sink takes one raw record (`bytes`, header and payload as the kernel
  wrote them); it must not block (the daemon's sinks queue, see
  runner/capture/channel.py);
- a record whose key has no sink (a run that already ended, key 0: the
  kernel could not know the run) is counted in `orphans`, never given to
  another run.

Direct mode uses it with a single run; the daemon with one sink per live run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ebpf.wire import HEADER, RUN_OFFSET

Sink = Callable[[bytes], None]


class RingReader(Protocol):
    """What the observer needs from the sensor (ebpf/monitor.py `Monitor`)."""

    def set_sink(self, sink: Sink) -> None: ...

    def wait(self, timeout_ms: int, wake: int | None = None) -> None: ...

    def drain(self) -> None: ...


class Observer:
    """Reads the ring and hands each record to the sink of its run key."""

    def __init__(self, ring: RingReader) -> None:
        self._ring = ring
        self._sinks: dict[int, Sink] = {}
        self.orphans = 0
        """Records no live run claimed (ended runs' late records, the unknown run)."""
        ring.set_sink(self._dispatch)

    def open_run(self, key: int, sink: Sink) -> None:
        """Records of run `key` go to `sink` from now on."""
        if key in self._sinks:
            raise ValueError(f"run key {key} is already open")
        self._sinks[key] = sink

    def close_run(self, key: int) -> None:
        """Stop handing on run `key`'s records (later ones are orphans)."""
        self._sinks.pop(key, None)

    @property
    def runs(self) -> frozenset[int]:
        return frozenset(self._sinks)

    def _dispatch(self, record: bytes) -> None:
        # the u16 at RUN_OFFSET, little-endian, read inline: this runs once per record
        sink = self._sinks.get(record[RUN_OFFSET] | record[RUN_OFFSET + 1] << 8) \
            if len(record) >= HEADER.size else None
        if sink is None:
            self.orphans += 1
        else:
            sink(record)

    def wait(self, timeout_ms: int, wake: int | None = None) -> None:
        """Sleep until the kernel forces a wakeup (the ring filling up), `wake` is readable, or timeout."""
        self._ring.wait(timeout_ms, wake)

    def drain(self) -> None:
        """Hand every record now in the ring to its run's sink."""
        self._ring.drain()

    def close(self) -> None:
        """Nothing to free (its records live in Python objects); the same call as the C consumer's."""
