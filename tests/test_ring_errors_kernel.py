"""A failed ring read is an error, never a quiet ring: libbpf's negative returns reach the caller.

libbpf stops reading at the first record whose callback returns a negative
code and returns that code (from `ring_buffer__consume` and
`ring_buffer__poll`); a reader that ignored it would take the rest of the ring
for empty. Here a real monitor's ring holds a run's records and its callback
fails: both reads must raise `RingError` with the callback's code. The C
consumer's own pause is such a return too, and must stay a pause.
"""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Iterator

import pytest

from ebpf import ringsink
from ebpf.loader import RingError
from ebpf.monitor import RING_CALLBACK, RUN_KEY, Monitor, MonitorConfig
from runner.capture.cgroup import RunCgroup

pytestmark = pytest.mark.kernel


@pytest.fixture
def monitor_with_records() -> Iterator[Monitor]:
    """A monitor whose ring holds the records of a short command in its run's cgroup (unread)."""
    cgroup = RunCgroup.create("ring-errors")
    monitor = Monitor(MonitorConfig(ringbuf_pages=64), lambda _r: None)
    try:
        monitor.add_run(RUN_KEY, cgroup.id, None)
        subprocess.run(["sh", "-c", 'echo $$ > "$1" && exec cat /etc/hostname', "sh",
                        str(cgroup.path / "cgroup.procs")], check=True, capture_output=True, timeout=30)
        yield monitor
    finally:
        monitor.close()
        cgroup.remove()


@pytest.mark.parametrize("read", ["consume", "poll"])
def test_a_callback_error_is_raised_not_taken_for_an_empty_ring(monitor_with_records: Monitor,
                                                                read: str) -> None:
    calls = []

    def failing(_ctx: int, _data: int, _size: int) -> int:
        calls.append(1)
        return -errno.EIO

    callback = RING_CALLBACK(failing)
    monitor_with_records.open_ring(callback, 0)
    with pytest.raises(RingError) as raised:
        if read == "consume":
            monitor_with_records.drain()
        else:
            monitor_with_records.wait(1000)
    assert raised.value.errno == errno.EIO
    assert calls == [1]  # libbpf stopped at the first record


def test_the_c_consumers_pause_stays_a_pause(monitor_with_records: Monitor) -> None:
    """A 64-byte bound: every record pauses the drain (libbpf returns -1), and the drain resumes
    until the ring is empty, handing every record on."""
    observer = ringsink.BatchObserver(monitor_with_records, pause_bytes=64)
    got: list[int] = []
    try:
        observer.open_run(RUN_KEY, lambda _items, count: got.append(count))
        observer.drain()
    finally:
        observer.close()
    assert observer.pauses >= 2
    assert sum(got) == sum(monitor_with_records.counters(RUN_KEY).emitted.values())
