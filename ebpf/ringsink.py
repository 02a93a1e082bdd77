"""The C ring consumer (ebpf/ringsink.c) behind the observer's interface.

`Observer` (ebpf/observer.py) makes one Python call per record: ctypes runs
the callback, copies the record into `bytes`, and the sink appends it. Here
libbpf calls a C function instead, which appends each record to its run's
buffer already encoded for the run's destination (a spool Batch's msgpack
items, or the run channel's length-prefixed frames); after each `wait` or
`drain` every run's buffer is handed on as one `bytes` with its record count
(a `BatchSink`). Python work per drain, none per record.

Same rules as the observer: records in ring order, demultiplexed by the run
key in the header, unknown keys counted in `orphans` and never handed to
another run; the ring is read only inside `wait`/`drain`, so a held ring
(`ASSAY_RUNNER_HOLD_RING`) stays unread. Memory is bounded: a drain pauses
once `PAUSE_BYTES` are buffered, the buffers are handed on, and it resumes.

The library is built by `make setup` (scripts/setup.sh) into `LIBRARY`; when
it is missing, `available()` is False and callers keep the Python observer.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from ebpf.loader import RingError

SOURCE = Path(__file__).resolve().parent / "ringsink.c"
LIBRARY = SOURCE.with_name("_ringsink.so")
MSGPACK = 0
"""Buffer format: msgpack `bin` items, the body of a spool Batch's `records` array."""
FRAMES = 1
"""Buffer format: u32 little-endian length + record, the daemon's run channel framing."""
PAUSE_BYTES = 1 << 20
"""Buffered bytes (all runs) at which a drain stops to hand them on (about 8,000 open records):
a quarter of the default ring, so a late drain of a full ring costs no more memory than this."""

BatchSink = Callable[[bytes, int], None]
"""Takes one run's buffer (encoded records, in ring order) and how many records it holds."""

_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)
"""libbpf's ring_buffer_sample_fn, as BCC and ebpf/monitor.py (`RING_CALLBACK`) declare it."""


class CallbackRing(Protocol):
    """What the consumer needs from the sensor (ebpf/monitor.py `Monitor`)."""

    def open_ring(self, callback: object, ctx: int) -> None: ...

    def wait(self, timeout_ms: int, wake: int | None = None) -> None: ...

    def drain(self) -> None: ...


def available() -> bool:
    """Is the compiled consumer there (and at least as new as its source)?"""
    return LIBRARY.exists() and LIBRARY.stat().st_mtime >= SOURCE.stat().st_mtime


def _library() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(LIBRARY))
    u64p = ctypes.POINTER(ctypes.c_uint64)
    signatures = {
        "ringsink_new": (ctypes.c_void_p, [ctypes.c_uint64]),
        "ringsink_free": (None, [ctypes.c_void_p]),
        "ringsink_open_run": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int32]),
        "ringsink_close_run": (None, [ctypes.c_void_p, ctypes.c_uint32]),
        "ringsink_peek": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_uint32, u64p, u64p]),
        "ringsink_clear": (None, [ctypes.c_void_p, ctypes.c_uint32]),
        "ringsink_unpause": (None, [ctypes.c_void_p]),
        "ringsink_run_total": (ctypes.c_uint64, [ctypes.c_void_p, ctypes.c_uint32]),
        "ringsink_orphans": (ctypes.c_uint64, [ctypes.c_void_p]),
        "ringsink_lost": (ctypes.c_uint64, [ctypes.c_void_p]),
        "ringsink_paused": (ctypes.c_int32, [ctypes.c_void_p]),
    }
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


class RingSink:
    """The C consumer's buffers, one per open run key, independent of any ring (testable alone)."""

    def __init__(self, pause_bytes: int = PAUSE_BYTES) -> None:
        self._lib = _library()
        self.handle: int = self._lib.ringsink_new(pause_bytes)
        if not self.handle:
            raise MemoryError("cannot allocate the ring consumer")
        self.callback = _CALLBACK(("ringsink_record", self._lib))
        """The C function libbpf calls per record, with `handle` as its context."""

    def open_run(self, key: int, fmt: int) -> None:
        if self._lib.ringsink_open_run(self.handle, key, fmt) < 0:
            raise ValueError(f"run key {key} (slot {key % 64}) is already open or format {fmt} is unknown")

    def close_run(self, key: int) -> None:
        self._lib.ringsink_close_run(self.handle, key)

    def take(self, key: int) -> tuple[bytes, int]:
        """The run's buffered records (encoded) and their count; the buffer is emptied."""
        size, count = ctypes.c_uint64(), ctypes.c_uint64()
        pointer = self._lib.ringsink_peek(self.handle, key, ctypes.byref(size), ctypes.byref(count))
        if not count.value:
            return b"", 0
        data = ctypes.string_at(pointer, size.value)
        self._lib.ringsink_clear(self.handle, key)
        return data, count.value

    def total(self, key: int) -> int:
        """Records given to run `key` since it was opened."""
        return int(self._lib.ringsink_run_total(self.handle, key))

    def unpause(self) -> None:
        self._lib.ringsink_unpause(self.handle)

    @property
    def paused(self) -> bool:
        """The last drain stopped at the byte bound (more may be waiting in the ring)."""
        return bool(self._lib.ringsink_paused(self.handle))

    @property
    def orphans(self) -> int:
        return int(self._lib.ringsink_orphans(self.handle))

    @property
    def lost(self) -> int:
        """Records the consumer could not keep (a buffer could not grow)."""
        return int(self._lib.ringsink_lost(self.handle))

    def free(self) -> None:
        if self.handle:
            self._lib.ringsink_free(self.handle)
            self.handle = 0


class BatchObserver:
    """The observer's interface over the C consumer: a `BatchSink` per run key."""

    def __init__(self, ring: CallbackRing, pause_bytes: int = PAUSE_BYTES) -> None:
        self._ring = ring
        self.sink = RingSink(pause_bytes)
        self._sinks: dict[int, BatchSink] = {}
        self.pauses = 0
        """Drains that stopped at the byte bound and resumed after handing on."""
        ring.open_ring(self.sink.callback, self.sink.handle)

    def open_run(self, key: int, sink: BatchSink, fmt: int = MSGPACK) -> None:
        """Records of run `key` go to `sink`, encoded as `fmt`, from now on."""
        if key in self._sinks:
            raise ValueError(f"run key {key} is already open")
        self.sink.open_run(key, fmt)
        self._sinks[key] = sink

    def close_run(self, key: int) -> None:
        """Hand on what is buffered for `key`; its later records are orphans."""
        self._hand_on()
        self._sinks.pop(key, None)
        self.sink.close_run(key)

    @property
    def runs(self) -> frozenset[int]:
        return frozenset(self._sinks)

    @property
    def orphans(self) -> int:
        return self.sink.orphans

    def wait(self, timeout_ms: int, wake: int | None = None) -> None:
        """Sleep until the kernel forces a wakeup, `wake` is readable or `timeout_ms` passes;
        hand on what arrived (with `wake`, the ring is only watched: the caller drains)."""
        self.sink.unpause()
        self._read(lambda: self._ring.wait(timeout_ms, wake))
        self._hand_on()
        if self.sink.paused:
            self.pauses += 1
            self.drain()

    def drain(self) -> None:
        """Hand every record now in the ring to its run's sink, `PAUSE_BYTES` at a time."""
        while True:
            self.sink.unpause()
            self._read(self._ring.drain)
            self._hand_on()
            if not self.sink.paused:
                return
            self.pauses += 1

    def _read(self, read: Callable[[], None]) -> None:
        """Read the ring; libbpf reports the consumer's own pause (its callback returned -1) as an
        error: that one is the pause, every other one is raised (`loader.RingError`)."""
        try:
            read()
        except RingError:
            if not self.sink.paused:
                raise

    def _hand_on(self) -> None:
        for key, sink in self._sinks.items():
            data, count = self.sink.take(key)
            if count:
                sink(data, count)

    def close(self) -> None:
        """Free the C buffers (the monitor must be closed or no longer polled)."""
        self.sink.free()
