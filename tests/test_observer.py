"""The observer's demultiplexing and the run channel, without root.

Recorded raw records (tests/data/threads.spool) are stamped with two run
keys and interleaved as one shared ring would hand them over; the observer
must give each run exactly its own records in ring order, through the
channel's framing and fence, and never hand a record of an unknown key to
anyone. The sensor's maps are stood in for by counters the test sets.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from ebpf.monitor import RunCounters, RunLedger
from ebpf.observer import Observer
from ebpf.wire import HEADER, RUN, RUN_OFFSET, RUN_SLOTS
from runner.capture import channel
from runner.capture.channel import ChannelSource, ChannelWriter
from spool.format import SpoolRecords

DATA = Path(__file__).parent / "data"


def stamped(record: bytes, key: int) -> bytes:
    return record[:RUN_OFFSET] + RUN.pack(key) + record[RUN_OFFSET + RUN.size:]


class Ring:
    """A ring that hands over a scripted list of records on each drain."""

    def __init__(self, records: list[bytes]) -> None:
        self.records = records
        self.sink: Callable[[bytes], None] | None = None

    def set_sink(self, sink: Callable[[bytes], None]) -> None:
        self.sink = sink

    def wait(self, timeout_ms: int, wake: int | None = None) -> None:
        pass

    def drain(self) -> None:
        assert self.sink is not None
        for record in self.records:
            self.sink(record)
        self.records = []


class Counters:
    """The sensor's per-slot counters as the test sets them."""

    def __init__(self) -> None:
        self.slots: dict[int, RunCounters] = {}
        self.added: list[tuple[int, int]] = []
        self.removed: list[int] = []

    def counters(self, key: int) -> RunCounters:
        return self.slots.get(key % RUN_SLOTS, RunCounters({"open": 0}, {"open": 0}, 0))

    def unattributed(self) -> RunCounters:
        return self.counters(0)

    def add_run(self, key: int, cgroup_id: int, net: object) -> None:
        self.added.append((key, cgroup_id))

    def remove_run(self, key: int) -> int:
        self.removed.append(key)
        return 0


class Group:
    id = 4242


@pytest.fixture(scope="module")
def recorded() -> list[bytes]:
    records = list(SpoolRecords(DATA / "threads.spool"))
    assert len(records) > 20
    return records


def test_each_run_gets_exactly_its_own_records_in_ring_order(recorded: list[bytes]) -> None:
    a, b, gone = 1, 2 + RUN_SLOTS, 3
    ring_order = [stamped(r, (a, b, gone, 0)[i % 4]) for i, r in enumerate(recorded)]
    observer = Observer(Ring(ring_order))
    got: dict[int, list[bytes]] = {a: [], b: []}
    observer.open_run(a, got[a].append)
    observer.open_run(b, got[b].append)
    observer.drain()
    for key in (a, b):
        assert got[key] == [r for r in ring_order if RUN.unpack_from(r, RUN_OFFSET)[0] == key]
    assert observer.orphans == sum(1 for i in range(len(recorded)) if i % 4 >= 2)
    with pytest.raises(ValueError, match="already open"):
        observer.open_run(a, got[a].append)


def test_a_closed_run_gets_nothing_more(recorded: list[bytes]) -> None:
    ring = Ring([stamped(r, 5) for r in recorded[:10]])
    observer = Observer(ring)
    got: list[bytes] = []
    observer.open_run(5, got.append)
    observer.drain()
    observer.close_run(5)
    ring.records = [stamped(r, 5) for r in recorded[10:20]]
    observer.drain()
    assert len(got) == 10 and observer.orphans == 10


def test_the_channel_delivers_every_record_then_the_fence(recorded: list[bytes]) -> None:
    """Daemon side and worker side over a real socket pair: framing, order, the fence after the last."""
    key = 7
    ours, theirs = channel.pair()
    writer = ChannelWriter(ours)
    sensor = Counters()
    source = ChannelSource(theirs, sensor, key, Group(), None)  # type: ignore[arg-type]
    assert sensor.added == [(key, Group.id)]
    records = [stamped(r, key) for r in recorded] * 50  # more than one socket buffer's worth
    got: list[bytes] = []
    source.set_sink(got.append)

    def daemon() -> None:  # the observer's side: answers the fence request after the last record
        for r in records:
            writer.add(r)
        ours.setblocking(True)
        assert ours.recv(1) == channel.FENCE_REQUEST
        writer.fence()
        writer.flush()

    thread = threading.Thread(target=daemon)
    thread.start()
    source.finish()
    thread.join()
    assert got == records
    source.close()
    assert sensor.removed == [key]
    assert writer.fence_requested() is None  # the worker's end is closed
    ours.close()


def test_records_before_the_sink_wait_for_it(recorded: list[bytes]) -> None:
    ours, theirs = channel.pair()
    writer = ChannelWriter(ours)
    source = ChannelSource(theirs, Counters(), 9, Group(), None)  # type: ignore[arg-type]
    writer.add(stamped(recorded[0], 9))
    writer.flush()
    source.wait(1000)
    source.drain()
    got: list[bytes] = []
    source.set_sink(got.append)
    assert got == [stamped(recorded[0], 9)]
    source.close()
    ours.close()


def test_a_worker_that_does_not_read_costs_counted_records_not_a_blocked_observer(
        recorded: list[bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(channel, "BACKLOG_MAX", 10 * HEADER.size * 40)
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    writer = ChannelWriter(ours)
    for _ in range(2000):
        writer.add(recorded[0])
        writer.flush()  # returns at once when the socket is full
    assert writer.lost > 0 and writer.pending
    theirs.close()
    assert writer.flush() is False
    ours.close()


def test_a_runs_ledger_is_its_slot_since_it_started_plus_what_nobody_could_own() -> None:
    sensor = Counters()
    key = 3 + RUN_SLOTS  # a later generation of slot 3
    sensor.slots[3] = RunCounters({"open": 5, "exec": 1}, {"open": 100, "exec": 4}, 2)
    sensor.slots[0] = RunCounters({"open": 0, "net_block": 1}, {"open": 0, "net_block": 0}, 0)
    ledger = RunLedger(sensor, key)  # type: ignore[arg-type]
    sensor.slots[3] = RunCounters({"open": 7, "exec": 1}, {"open": 130, "exec": 6}, 3)
    sensor.slots[0] = RunCounters({"open": 0, "net_block": 4}, {"open": 0, "net_block": 0}, 0)
    assert ledger.counters() == RunCounters(
        drops={"open": 2, "exec": 0, "unattributed_net_block": 3},
        emitted={"open": 30, "exec": 2}, untracked=1)
