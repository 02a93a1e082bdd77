"""The daemon's sensor and observer: the monitor loaded once, one ring reader, a channel per run.

Loaded when the daemon starts and kept for its life (no compile, attach or
detach per run): the tracepoint programs, and the network policy programs
linked once at the runs' parent cgroup (`<cgroup2>/assay-runner`) with each
run's rules in the maps (docs/daemon.md has the measurement behind that
choice). A run is a key:

- `start_run()` (daemon, before forking the worker) takes a free run slot
  and makes the run's channel, the observer's sink for that key;
- the worker adds the run to the kernel maps itself (`SharedSensor`, then
  `ChannelSource`: `Monitor.add_run` before its first task joins the run's
  cgroup) and removes it at the end (`remove_run`, purging its tasks);
- `end_run()` (daemon, when the worker is reaped) closes the channel,
  removes the run again in case the worker died before it could, and frees
  the slot.

Keys are `generation * RUN_SLOTS + slot`: a slot is reused with a new key,
so a late record of an earlier run on the same slot is an orphan, never the
new run's.
"""

from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass

from ebpf.monitor import Monitor, MonitorConfig, MonitorError, NetPolicySpec
from ebpf.observer import Observer
from ebpf.wire import RUN_SLOTS
from runner.capture import channel
from runner.capture.cgroup import PARENT, RunCgroup
from runner.capture.channel import ChannelSource, ChannelWriter
from runner.capture.sources import RunSource
from runner.errors import RunnerError
from runner.host.mounts import cgroup2_mount
from runner.logs import get_logger

GENERATIONS = (1 << 16) // RUN_SLOTS
log = get_logger("daemon")


@dataclass
class RunChannel:
    key: int
    writer: ChannelWriter


class DaemonSensor:
    """The monitor, its observer and the live runs' channels, in the daemon's main process."""

    def __init__(self, ringbuf_pages: int) -> None:
        parent = cgroup2_mount() / PARENT
        try:
            parent.mkdir(parents=True, exist_ok=True)
            self.monitor = Monitor(MonitorConfig(ringbuf_pages), lambda _record: None)
        except (OSError, MonitorError) as exc:
            raise RunnerError(f"cannot load the monitor: {exc}; run 'assay-runner doctor'") from exc
        try:
            self.monitor.attach_net(parent, link=True)
        except MonitorError as exc:
            self.monitor.close()
            raise RunnerError(str(exc)) from exc
        self.ringbuf_pages = ringbuf_pages
        self.observer = Observer(self.monitor)
        self.runs: dict[int, RunChannel] = {}
        self._generation = [0] * RUN_SLOTS

    def start_run(self) -> tuple[RunChannel, socket.socket]:
        """A free key and its channel: (the daemon's side, the worker's end of the socket)."""
        used = {run.key % RUN_SLOTS for run in self.runs.values()}
        slot = next((s for s in range(1, RUN_SLOTS) if s not in used), None)
        if slot is None:
            raise RunnerError(f"all {RUN_SLOTS - 1} run slots are in use")
        self._generation[slot] = (self._generation[slot] + 1) % GENERATIONS
        key = self._generation[slot] * RUN_SLOTS + slot
        ours, theirs = channel.pair()
        run = RunChannel(key, ChannelWriter(ours))
        self.observer.open_run(key, run.writer.add)
        self.runs[key] = run
        return run, theirs

    def end_run(self, run: RunChannel) -> None:
        """The worker is gone: stop its channel and make sure the kernel forgot the run."""
        self.observer.close_run(run.key)
        self.runs.pop(run.key, None)
        run.writer.sock.close()
        with contextlib.suppress(Exception):
            left = self.monitor.remove_run(run.key)
            if left:
                log.warning("run.tasks_forgotten", key=run.key, tasks=left)
        if run.writer.lost:
            log.warning("run.records_lost", key=run.key, records=run.writer.lost)

    def tick(self) -> None:
        """Drain the ring into the runs' channels and push what the sockets take."""
        self.observer.drain()
        for run in self.runs.values():
            run.writer.flush()

    def fence(self, run: RunChannel) -> bool:
        """The worker asked for its final records: drain, then queue the fence. False: worker gone."""
        asked = run.writer.fence_requested()
        if asked is None:
            return False
        if asked:
            self.observer.drain()
            run.writer.fence()
        run.writer.flush()
        return True

    @property
    def busy(self) -> bool:
        """Some channel still holds records the socket did not take."""
        return any(run.writer.pending for run in self.runs.values())

    def close(self) -> None:
        self.monitor.close()


class SharedSensor:
    """The worker's `Sensor` (runner/capture/sources.py): its run on the daemon's loaded monitor."""

    def __init__(self, monitor: Monitor, key: int, sock: socket.socket) -> None:
        self._monitor, self._key, self._sock = monitor, key, sock

    def open(self, cgroup: RunCgroup, net: NetPolicySpec | None) -> RunSource:
        try:
            return ChannelSource(self._sock, self._monitor, self._key, cgroup, net)
        except MonitorError as exc:
            raise RunnerError(str(exc)) from exc
