"""The sensor loop's bookkeeping when a worker dies (no BPF: the loop's handlers alone).

A killed worker makes two events at once: the daemon's close of its run on
the control socket and the end of file on the run's channel. Both can come
back from one `select`, in either order; the second must find the run gone
and do nothing. Before, it raised KeyError, the sensor process died, and the
daemon stopped every other run with it (found by `bench.soak`).
"""

from __future__ import annotations

import selectors
import socket

from runner.capture.channel import ChannelWriter
from runner.daemon.sensor import _Run, _Sensor


class _Observer:
    def __init__(self) -> None:
        self.closed: list[int] = []

    def close_run(self, key: int) -> None:
        self.closed.append(key)


class _Monitor:
    def remove_run(self, key: int) -> int:
        return 0


def _sensor_with_one_run(key: int) -> tuple[_Sensor, socket.socket]:
    sensor = object.__new__(_Sensor)  # the loop's state without loading a monitor
    sensor.observer = _Observer()  # type: ignore[assignment]  # a stand-in: no BPF
    sensor.monitor = _Monitor()  # type: ignore[assignment]  # a stand-in: no BPF
    sensor.sel = selectors.DefaultSelector()
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    sensor.runs = {key: _Run(ChannelWriter(ours))}
    sensor.sel.register(ours, selectors.EVENT_READ, None)
    return sensor, theirs


def test_a_workers_end_after_the_daemons_close_in_the_same_batch_is_ignored() -> None:
    sensor, worker_end = _sensor_with_one_run(135)
    worker_end.close()  # the worker was killed
    sensor._end(135)  # the daemon's close, handled first
    sensor._on_worker(135)  # the channel's end of file, from the same select batch
    observer = sensor.observer
    assert isinstance(observer, _Observer)  # the stand-in _sensor_with_one_run put there
    assert sensor.runs == {} and observer.closed == [135]


def test_a_daemons_close_after_the_workers_end_is_ignored() -> None:
    sensor, worker_end = _sensor_with_one_run(7)
    worker_end.close()
    sensor._on_worker(7)  # end of file: the run ends here
    sensor._end(7)  # the daemon's close comes after: nothing left to do
    assert sensor.runs == {}
