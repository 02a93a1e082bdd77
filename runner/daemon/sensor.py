"""The daemon's sensor process: the monitor loaded once, one ring reader, a channel per run.

A child of the daemon, started before it listens, holds everything BPF for
the daemon's life (no compile, attach or detach per run): the tracepoint
programs, and the network policy programs linked once at the runs' parent
cgroup (`<cgroup2>/assay-runner`) with each run's rules in the maps
(docs/daemon.md has the measurement behind that choice). Its loop is the
observer: it drains the ring every POLL_S (or when the kernel wakes it) and
hands each record to its run's channel (runner/capture/channel.py).

Keeping BPF out of the daemon's main process keeps that process small, and
the run workers it forks (and the command's helper chain they fork) cheap
to fork: with BCC and LLVM loaded a process is about six times bigger.

The daemon (`SensorHandle`) allocates run keys and hands the sensor the
sensor's end of each run's channel over a control socket (SCM_RIGHTS); the
worker then asks for its run to be added before its command starts, for
counters, and for the fence at the end (channel.py). Keys are
`generation * RUN_SLOTS + slot`: a slot is reused with a new key, so a late
record of an earlier run on the same slot is an orphan, never the new run's.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import struct
import traceback
from dataclasses import dataclass
from types import TracebackType

from ebpf.monitor import Monitor, MonitorConfig, NetPolicySpec, RunLedger
from ebpf.observer import Observer
from ebpf.ringsink import FRAMES, BatchObserver
from ebpf.wire import RUN_SLOTS
from runner.capture import channel
from runner.capture.cgroup import RunCgroup
from runner.capture.channel import Added, AddRun, ChannelSource, ChannelWriter, Counts, Failed, FenceRequest
from runner.capture.sources import RunSource, ring_consumer
from runner.errors import RunnerError
from runner.logs import get_logger

GENERATIONS = (1 << 16) // RUN_SLOTS
POLL_S = 0.02
"""How often the ring is drained while runs are live (the kernel also wakes the sensor when it fills)."""
CONTROL = struct.Struct("<cI")
"""Daemon to sensor: b"o" + key (with the channel's fd: open) or b"c" + key (close)."""
READY = b"ready"
log = get_logger("daemon.sensor")


def _where(tb: TracebackType | None) -> str:
    """The innermost frame of a traceback as `file:line in function` (one log field, no dump)."""
    frames = traceback.extract_tb(tb)
    if not frames:
        return "unknown"
    last = frames[-1]
    return f"{last.filename}:{last.lineno} in {last.name}"


class SensorHandle:
    """The daemon's side: the sensor process, its control socket and the run keys in use."""

    def __init__(self, config: MonitorConfig) -> None:
        self.ringbuf_pages = config.ringbuf_pages
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the sensor process
            code = 1
            try:
                ours.close()
                code = _Sensor(theirs, config).serve()
            except RunnerError as exc:
                with contextlib.suppress(Exception):
                    theirs.send(f"error {exc}".encode())
            except BaseException as exc:
                with contextlib.suppress(Exception):  # after READY nobody reads this: the log says why
                    log.error("sensor.failed", error=f"{type(exc).__name__}: {exc}",
                              where=_where(exc.__traceback__))
                with contextlib.suppress(Exception):
                    theirs.send(f"error cannot load the monitor: {exc}; run 'assay-runner doctor'".encode())
            finally:
                os._exit(code)
        theirs.close()
        self.pid = pid
        self.control = ours
        answer = ours.recv(4096)
        if answer != READY:
            os.waitpid(pid, 0)
            raise RunnerError(answer.decode(errors="replace").removeprefix("error ")
                              or "the sensor process died while loading the monitor")
        self._keys: dict[int, int] = {}  # slot -> live key
        self._generation = [0] * RUN_SLOTS

    def start_run(self) -> tuple[int, socket.socket]:
        """A free key, its channel handed to the sensor; returns the key and the worker's end."""
        slot = next((s for s in range(1, RUN_SLOTS) if s not in self._keys), None)
        if slot is None:
            raise RunnerError(f"all {RUN_SLOTS - 1} run slots are in use")
        self._generation[slot] = (self._generation[slot] + 1) % GENERATIONS
        key = self._generation[slot] * RUN_SLOTS + slot
        sensor_end, worker_end = channel.pair()
        try:
            socket.send_fds(self.control, [CONTROL.pack(b"o", key)], [sensor_end.fileno()])
        except OSError as exc:
            worker_end.close()
            raise RunnerError(f"the daemon's sensor process is gone ({exc.strerror}); "
                              "the daemon is stopping") from exc
        finally:
            sensor_end.close()
        self._keys[slot] = key
        return key, worker_end

    def end_run(self, key: int) -> None:
        """The worker is gone: the sensor forgets the run (again, if the worker's close did it)."""
        self._keys.pop(key % RUN_SLOTS, None)
        with contextlib.suppress(OSError):
            self.control.send(CONTROL.pack(b"c", key))

    def close(self) -> None:
        """Stop the sensor: closing the control socket ends its loop; it unloads the monitor."""
        self.control.close()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


@dataclass
class _Run:
    writer: ChannelWriter
    ledger: RunLedger | None = None


class _Sensor:
    """The sensor process's loop (runs in the child)."""

    def __init__(self, control: socket.socket, config: MonitorConfig) -> None:
        from runner.host.checks import require_run_prerequisites

        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the daemon ends it, after its runs
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        require_run_prerequisites()  # here: they import BCC, which the daemon's main process must not
        parent = RunCgroup.parent_path()
        parent.mkdir(parents=True, exist_ok=True)
        self.monitor = Monitor(config, lambda _record: None)
        self.monitor.attach_net(RunCgroup.root_path(), link=True)
        consumer = ring_consumer()
        self.observer: Observer | BatchObserver = (
            BatchObserver(self.monitor) if consumer == "c" else Observer(self.monitor))
        """The C consumer frames each run's records for its channel with no Python call per record
        (direct mode's reader, ebpf/ringsink.py); the per-record Python observer where it is not built."""
        log.info("sensor.ring_consumer", consumer=consumer)
        self.control = control
        self.runs: dict[int, _Run] = {}
        self.sel = selectors.DefaultSelector()

    def serve(self) -> int:
        try:
            self.sel.register(self.control, selectors.EVENT_READ, self._on_control)
            self.sel.register(self.monitor.ring_fd(), selectors.EVENT_READ, None)
            self.control.send(READY)
            while self.control.fileno() >= 0:
                for key, _ in self.sel.select(timeout=POLL_S if self.runs else 1.0):
                    if key.data is not None:
                        key.data(key.fileobj)
                self.observer.drain()
                for run in self.runs.values():
                    run.writer.flush()
        finally:
            self.monitor.close()
            self.observer.close()  # after the monitor: libbpf no longer holds the C consumer's buffers
        return 0

    def _on_control(self, control: socket.socket) -> None:
        try:
            msg, fds, _flags, _addr = socket.recv_fds(control, CONTROL.size, 1)
        except OSError:
            msg, fds = b"", []
        if not msg:  # the daemon is gone or done: so are we
            self.sel.unregister(control)
            control.close()
            return
        op, key = CONTROL.unpack(msg)
        if op == b"o" and fds:
            sock = socket.socket(fileno=fds[0])
            sock.setblocking(False)
            run = _Run(ChannelWriter(sock))
            self.runs[key] = run
            if isinstance(self.observer, BatchObserver):
                self.observer.open_run(key, run.writer.add_frames, FRAMES)
            else:
                self.observer.open_run(key, run.writer.add)
            self.sel.register(sock, selectors.EVENT_READ, lambda _s, k=key: self._on_worker(k))
        elif op == b"c":
            self._end(key)

    def _on_worker(self, key: int) -> None:
        run = self.runs.get(key)
        if run is None:  # ended earlier in the same select batch (the daemon's close came first)
            return
        requests = run.writer.requests()
        if requests is None:  # the worker closed its end: the run is over
            self._end(key)
            return
        for request in requests:
            if isinstance(request, AddRun):
                try:
                    run.ledger = RunLedger(self.monitor, key)
                    self.monitor.add_run(key, request.cgroup_id, request.net)
                    run.writer.reply(Added())
                except Exception as exc:
                    run.writer.reply(Failed(message=str(exc)))
            elif run.ledger is None:
                run.writer.reply(Failed(message="the run was never added"))
            else:
                fence = isinstance(request, FenceRequest)
                if fence:
                    self.observer.drain()
                c = run.ledger.counters()
                run.writer.reply(Counts(drops=c.drops, emitted=c.emitted, untracked=c.untracked, fence=fence,
                                        hooks_missing=c.hooks_missing, path_source=c.path_source))
        run.writer.flush()

    def _end(self, key: int) -> None:
        run = self.runs.pop(key, None)
        self.observer.close_run(key)
        with contextlib.suppress(Exception):
            left = self.monitor.remove_run(key)
            if left:
                log.warning("run.tasks_forgotten", key=key, tasks=left)
        if run is not None:
            self.sel.unregister(run.writer.sock)
            run.writer.sock.close()
            if run.writer.lost:
                log.warning("run.records_lost", key=key, records=run.writer.lost)


class SharedSensor:
    """The worker's `Sensor` (runner/capture/sources.py): its run on the daemon's sensor process."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def open(self, cgroup: RunCgroup, net: NetPolicySpec | None) -> RunSource:
        return ChannelSource(self._sock, cgroup, net)
