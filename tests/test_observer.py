"""The observer's demultiplexing and the run channel, without root.

Recorded raw records (tests/data/threads.spool) are stamped with two run
keys and interleaved as one shared ring would hand them over; the observer
must give each run exactly its own records in ring order, through the
channel's framing and fence, and never hand a record of an unknown key to
anyone. The sensor's maps are stood in for by counters the test sets.
"""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from ebpf.monitor import RunCounters, RunLedger
from ebpf.observer import Observer
from ebpf.wire import HEADER, RUN, RUN_OFFSET, RUN_SLOTS
from runner.capture import channel
from runner.capture.channel import ChannelSource, ChannelWriter
from runner.errors import RunnerError
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

    def counters(self, key: int) -> RunCounters:
        return self.slots.get(key % RUN_SLOTS, RunCounters({"open": 0}, {"open": 0}, 0))

    def unattributed(self) -> RunCounters:
        return self.counters(0)


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


class SensorEnd:
    """The sensor's side of a channel, answering requests as the sensor process does (in a thread)."""

    def __init__(self, sock: socket.socket, records: list[bytes]) -> None:
        self.writer = ChannelWriter(sock)
        self.records = records
        self.seen: list[object] = []
        self.thread = threading.Thread(target=self._serve)
        self.thread.start()

    def _serve(self) -> None:
        counts = channel.Counts(drops={"open": 0}, emitted={"open": len(self.records)}, untracked=0,
                                hooks_missing={"fchmodat2": "absent_by_kernel"})
        while True:
            select.select([self.writer.sock], [], [], 5)
            requests = self.writer.requests()
            if requests is None:
                return
            for request in requests:
                self.seen.append(request)
                if isinstance(request, channel.AddRun):
                    self.writer.reply(channel.Added())
                    for r in self.records:  # the command's records, before the fence is asked for
                        self.writer.add(r)
                elif isinstance(request, channel.FenceRequest):
                    self.writer.reply(msgspec.structs.replace(counts, fence=True))
                else:
                    self.writer.reply(counts)
            while self.writer.pending:
                self.writer.flush()
                select.select([], [self.writer.sock], [], 5)


def test_the_channel_delivers_every_record_then_the_fence(recorded: list[bytes]) -> None:
    """Sensor side and worker side over a real socket pair: the run added first, framing, order,
    counters asked for in the middle, the fence after the last record."""
    key = 7
    ours, theirs = channel.pair()
    records = [stamped(r, key) for r in recorded] * 50  # more than one socket buffer's worth
    sensor = SensorEnd(ours, records)
    source = ChannelSource(theirs, Group(), None)  # type: ignore[arg-type]  # a stand-in cgroup
    got: list[bytes] = []
    source.set_sink(got.append)
    assert source.counters().emitted == {"open": len(records)}
    source.finish()
    assert got == records
    assert source.emitted() == {"open": len(records)}
    assert source.counters().hooks_missing == {"fchmodat2": "absent_by_kernel"}  # into the trailer
    source.close()
    sensor.thread.join(timeout=30)
    assert [type(r).__name__ for r in sensor.seen] == ["AddRun", "CountersRequest", "FenceRequest"]
    assert sensor.seen[0] == channel.AddRun(cgroup_id=Group.id)
    ours.close()


def test_a_refused_run_is_a_clear_error() -> None:
    ours, theirs = channel.pair()
    writer = ChannelWriter(ours)
    writer.reply(channel.Failed(message="run key 64 is not usable"))
    writer.flush()
    with pytest.raises(RunnerError, match="cannot take the run: run key 64 is not usable"):
        ChannelSource(theirs, Group(), None)  # type: ignore[arg-type]  # a stand-in cgroup
    theirs.close()
    ours.close()


def test_a_worker_sending_garbage_is_cut_off() -> None:
    ours, theirs = channel.pair()
    writer = ChannelWriter(ours)
    theirs.sendall(channel.FRAME.pack(3) + b"\xc1\xc1\xc1")
    select.select([ours], [], [], 5)
    assert writer.requests() is None
    ours.close()
    theirs.close()


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
    ledger = RunLedger(sensor, key)  # type: ignore[arg-type]  # a stand-in sensor
    sensor.slots[3] = RunCounters({"open": 7, "exec": 1}, {"open": 130, "exec": 6}, 3)
    sensor.slots[0] = RunCounters({"open": 0, "net_block": 4}, {"open": 0, "net_block": 0}, 0)
    assert ledger.counters() == RunCounters(
        drops={"open": 2, "exec": 0, "unattributed_net_block": 3},
        emitted={"open": 30, "exec": 2}, untracked=1)
