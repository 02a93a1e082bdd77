"""The C ring consumer's buffers (ebpf/ringsink.c), fed records the way libbpf would: no root."""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable

import pytest

from ebpf import ringsink
from ebpf.wire import HEADER, RUN_SLOTS
from spool.format import Batch, batch_head, encode_frame
from tests.spool_frames import batch_frames


@pytest.fixture(autouse=True)
def _built() -> None:
    assert ringsink.available(), "ebpf/_ringsink.so is missing or older than ringsink.c: run `make setup`"


def record(key: int, payload: bytes = b"", tid: int = 7) -> bytes:
    """A raw record: the 64-byte header (run key at offset 22) and its payload."""
    return HEADER.pack(1, tid, tid, 1, len(payload), 0, key, 0, 0, 0, 0, 0) + payload


def feed(sink: ringsink.RingSink, rec: bytes) -> int:
    buf = ctypes.create_string_buffer(rec, len(rec))
    return sink.callback(sink.handle, ctypes.cast(buf, ctypes.c_void_p), len(rec))


def frames(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        (n,) = struct.unpack_from("<I", data, pos)
        out.append(data[pos + 4:pos + 4 + n])
        pos += 4 + n
    return out


def test_records_go_to_their_runs_in_order_and_unknown_keys_are_orphans() -> None:
    sink = ringsink.RingSink()
    sink.open_run(1, ringsink.MSGPACK)
    sink.open_run(2, ringsink.FRAMES)
    sent: dict[int, list[bytes]] = {1: [], 2: []}
    sizes = [0, 10, 191, 192, 4000, 8191]  # around msgpack's bin 8 / bin 16 boundary (record = 64 + payload)
    for i, size in enumerate(sizes * 3):
        key = 1 + i % 2
        rec = record(key, bytes([i % 251]) * size, tid=i)
        sent[key].append(rec)
        assert feed(sink, rec) == 0
    for stray in (record(3), record(1 + RUN_SLOTS), record(0), b"short"):  # same slot as run 1: not run 1
        feed(sink, stray)
    items, count = sink.take(1)
    assert count == len(sent[1])
    frame = batch_head(count, len(items)) + items
    assert frame == encode_frame(Batch(records=sent[1]))  # the bytes msgspec writes
    assert [f.records for f in batch_frames(frame)] == [sent[1]]
    data, count = sink.take(2)
    assert count == len(sent[2]) and frames(data) == sent[2]
    assert sink.orphans == 4
    assert sink.take(1) == (b"", 0)  # taken means emptied
    assert (sink.total(1), sink.total(2), sink.lost) == (len(sent[1]), len(sent[2]), 0)
    sink.free()


@pytest.mark.parametrize("count", [0, 1, 15, 16, 65535, 65536])
def test_batch_frames_match_msgspec_at_every_array_size(count: int) -> None:
    records = [b"r%d" % (i % 10) for i in range(count)]
    items = b"".join(b"\xc4" + bytes([len(r)]) + r for r in records)
    assert batch_head(count, len(items)) + items == encode_frame(Batch(records=records))


def test_a_drain_pauses_at_the_byte_bound_and_keeps_the_record() -> None:
    sink = ringsink.RingSink(pause_bytes=1000)
    sink.open_run(5, ringsink.MSGPACK)
    results = [feed(sink, record(5, b"x" * 100)) for _ in range(10)]
    first_stop = results.index(-1)  # libbpf stops the drain where the callback returns < 0
    assert sink.paused and first_stop == 1000 // (2 + 164)
    assert sink.take(5)[1] == 10  # every record was kept, paused or not
    sink.unpause()
    assert not sink.paused and feed(sink, record(5)) == 0


def test_close_run_drops_its_buffer_and_its_slot_reopens() -> None:
    sink = ringsink.RingSink()
    sink.open_run(9, ringsink.MSGPACK)
    with pytest.raises(ValueError, match="already open"):
        sink.open_run(9 + RUN_SLOTS, ringsink.MSGPACK)
    feed(sink, record(9))
    sink.close_run(9)
    feed(sink, record(9))
    assert sink.orphans == 1
    sink.open_run(9 + RUN_SLOTS, ringsink.FRAMES)
    feed(sink, record(9 + RUN_SLOTS))
    assert sink.take(9 + RUN_SLOTS)[1] == 1


class FakeRing:
    """A ring whose drain feeds queued records to the registered C callback, as libbpf does."""

    def __init__(self) -> None:
        self.queue: list[bytes] = []
        self.callback: Callable[[int, ctypes.c_void_p, int], int] | None = None
        self.ctx = 0

    def open_ring(self, callback: object, ctx: int) -> None:
        assert isinstance(callback, ringsink._CALLBACK)  # what RingSink hands over, as to libbpf
        self.callback, self.ctx = callback, ctx

    def wait(self, timeout_ms: int, wake: int | None = None) -> None:
        self.drain()

    def drain(self) -> None:
        assert self.callback is not None, "drained before open_ring"
        while self.queue:
            rec = self.queue.pop(0)
            buf = ctypes.create_string_buffer(rec, len(rec))
            if self.callback(self.ctx, ctypes.cast(buf, ctypes.c_void_p), len(rec)) < 0:
                return


def test_the_observer_hands_every_record_on_across_pauses() -> None:
    ring = FakeRing()
    observer = ringsink.BatchObserver(ring, pause_bytes=4096)
    got: list[tuple[bytes, int]] = []
    observer.open_run(1, lambda items, count: got.append((items, count)))
    sent = [record(1, b"p" * (i % 300), tid=i) for i in range(500)]
    ring.queue = [*sent, record(2)]
    observer.drain()
    assert len(got) > 1 and observer.pauses > 0  # the bound split the drain
    spooled = [r for items, count in got
               for f in batch_frames(batch_head(count, len(items)) + items) for r in f.records]
    assert spooled == sent and observer.orphans == 1
    observer.close()


@pytest.mark.parametrize("bound", [1 << 20, 3000])
def test_channel_writer_takes_framed_batches_as_it_takes_records(monkeypatch: pytest.MonkeyPatch,
                                                                 bound: int) -> None:
    """The daemon's run channel fed by the C consumer queues the same bytes and loses the same records."""
    from runner.capture import channel

    monkeypatch.setattr(channel, "BACKLOG_MAX", bound)
    records = [record(4, b"q" * (i * 7 % 200), tid=i) for i in range(40)]
    one, other = channel.pair()
    by_record, by_batch = channel.ChannelWriter(one), channel.ChannelWriter(other)
    for r in records:
        by_record.add(r)
    sink = ringsink.RingSink()
    sink.open_run(4, ringsink.FRAMES)
    for r in records:
        feed(sink, r)
    by_batch.add_frames(*sink.take(4))
    assert by_batch._backlog == by_record._backlog and by_batch.lost == by_record.lost
    assert (by_record.lost > 0) == (bound < 8000)
    one.close()
    other.close()
