"""The run channel: how the daemon's observer hands one run's records to that run's worker.

A stream socket pair per run. Daemon to worker: frames of a little-endian
u32 length and that many bytes of one raw record (header and payload as the
kernel wrote them); a frame of length 0 is the fence: every record the
kernel had written for the run when the worker asked is before it. Worker to
daemon: the byte `F` asks for a fence (after the command is gone, for the
final drain). Nothing else travels. A C consumer writing these frames to the
same fds is a drop-in replacement for `ChannelWriter` (docs/daemon.md).

`ChannelWriter` never blocks the observer: frames that do not fit the
socket wait in a per-run backlog, bounded; a record beyond the bound is not
written and shows in the run's health as lost in transit (the kernel
counted it as emitted, the spool does not hold it).
"""

from __future__ import annotations

import select
import socket
import struct

from ebpf.monitor import Monitor, NetPolicySpec, RunLedger
from runner.capture.cgroup import RunCgroup
from runner.capture.sources import Buffered

FRAME = struct.Struct("<I")
FENCE = FRAME.pack(0)
FENCE_REQUEST = b"F"
BACKLOG_MAX = 64 << 20
"""Bytes a run's writer holds for a worker that is behind; past this, records are lost (and counted)."""
SOCKET_BUFFER = 4 << 20


def pair() -> tuple[socket.socket, socket.socket]:
    """(daemon end, worker end), with buffers large enough for a burst between drains."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    for end in (ours, theirs):
        end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
        end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
    ours.setblocking(False)
    return ours, theirs


class ChannelWriter:
    """The daemon's end of one run's channel: the observer's sink for that run."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._backlog = bytearray()
        self.lost = 0
        """Records not written because the backlog was full."""

    def add(self, record: bytes) -> None:
        if len(self._backlog) + len(record) > BACKLOG_MAX:
            self.lost += 1
            return
        self._backlog += FRAME.pack(len(record))
        self._backlog += record

    def add_frames(self, frames: bytes, count: int) -> None:
        """Sink for the C consumer (ebpf/ringsink.py, format FRAMES): `count` records already
        framed. Within the bound they are queued in one go; past it, frame by frame as `add`."""
        if len(self._backlog) + len(frames) <= BACKLOG_MAX:
            self._backlog += frames
            return
        pos = 0
        for _ in range(count):
            (size,) = FRAME.unpack_from(frames, pos)
            self.add(frames[pos + FRAME.size:pos + FRAME.size + size])
            pos += FRAME.size + size

    def fence(self) -> None:
        """Queue the fence (the caller drained the ring first)."""
        self._backlog += FENCE

    @property
    def pending(self) -> bool:
        return bool(self._backlog)

    def flush(self) -> bool:
        """Write what the socket takes now; False when the worker's end is gone."""
        try:
            while self._backlog:
                sent = self.sock.send(self._backlog)
                del self._backlog[:sent]
        except BlockingIOError:
            pass
        except OSError:
            self._backlog.clear()
            return False
        return True

    def fence_requested(self) -> bool | None:
        """Whether the worker asked for a fence; None when it closed its end."""
        try:
            data = self.sock.recv(64)
        except BlockingIOError:
            return False
        except OSError:
            return None
        if not data:
            return None
        return FENCE_REQUEST in data


class ChannelSource(Buffered):
    """The worker's end: a `RunSource` (runner/capture/sources.py) fed by the daemon's observer.

    The run is added to the daemon's monitor here (this worker shares it:
    forked after it was loaded) and removed by `close()`; counters come
    from its maps (`RunLedger`).
    """

    def __init__(self, sock: socket.socket, monitor: Monitor, key: int, cgroup: RunCgroup,
                 net: NetPolicySpec | None) -> None:
        super().__init__()
        self._sock = sock
        self._monitor = monitor
        self._key = key
        self._cgroup_id = cgroup.id
        self.ledger = RunLedger(monitor, key)
        self._buf = bytearray()
        self._fenced = False
        monitor.add_run(key, cgroup.id, net)

    def close(self) -> None:
        """Forget the run in the kernel (its cgroup is empty by now) and close the channel."""
        try:
            self._monitor.remove_run(self._key, self._cgroup_id)
        finally:
            self._sock.close()

    def wait(self, timeout_ms: int) -> None:
        select.select([self._sock], [], [], timeout_ms / 1000)

    def drain(self) -> None:
        """Hand on every record that has arrived (never blocks)."""
        self._read(block=False)

    def finish(self) -> None:
        """The final drain: ask for a fence and hand on everything before it."""
        self._sock.sendall(FENCE_REQUEST)
        while not self._fenced:
            if not self._read(block=True):
                raise ConnectionError("the daemon closed the run channel before the fence")

    def _read(self, block: bool) -> bool:
        """Read what is there (at least something when `block`); False at EOF."""
        while True:
            try:
                data = self._sock.recv(1 << 20, 0 if block else socket.MSG_DONTWAIT)
            except BlockingIOError:
                return True
            if not data:
                return False
            self._buf += data
            self._split()
            if block or self._fenced:
                return True

    def _split(self) -> None:
        buf, pos, size = self._buf, 0, FRAME.size
        while len(buf) - pos >= size:
            (n,) = FRAME.unpack_from(buf, pos)
            if n == 0:
                self._fenced = True
                pos += size
                continue
            if len(buf) - pos - size < n:
                break
            self.sink(bytes(buf[pos + size:pos + size + n]))
            pos += size + n
        del buf[:pos]

    def drops(self) -> dict[str, int]:
        return self.ledger.counters().drops

    def emitted(self) -> dict[str, int]:
        return self.ledger.counters().emitted
