"""The run channel: between the daemon's sensor process and one run's worker.

A stream socket pair per run. Sensor to worker: frames of a little-endian
u32 length and that many bytes of one raw record (header and payload as the
kernel wrote them); a length of 0 is followed by one control frame (u32
length, msgpack `Reply`). Worker to sensor: u32-length msgpack `Request`s:

- `AddRun` (before the command's first task exists): the run's cgroup and
  network rules go into the monitor's maps, answered by `Added` or `Failed`;
- `CountersRequest`: the run's counters (`Counts`), for the live status;
- `FenceRequest` (the command is gone): the sensor drains the whole ring,
  queues everything of the run's, then `Counts(fence=True)`: every record
  the kernel wrote for the run is before it.

Closing the worker's end ends the run in the kernel (its key leaves the
maps, its tasks are forgotten). A C consumer that writes the record frames
to these sockets is a drop-in replacement for `ChannelWriter.add`, as long
as a run's fence is written after that run's queued records.

`ChannelWriter` never blocks the sensor: frames that do not fit the socket
wait in a per-run backlog, bounded; a record beyond the bound is not
written and shows in the run's health as lost in transit (the kernel
counted it as emitted, the spool does not hold it).
"""

from __future__ import annotations

import select
import socket
import struct

import msgspec

from ebpf.monitor import NetPolicySpec, RunCounters
from runner.capture.cgroup import RunCgroup
from runner.capture.sources import Buffered
from runner.errors import RunnerError

FRAME = struct.Struct("<I")
CONTROL = FRAME.pack(0)
BACKLOG_MAX = 64 << 20
"""Bytes a run's writer holds for a worker that is behind; past this, records are lost (and counted)."""
SOCKET_BUFFER = 4 << 20
REQUEST_MAX = 1 << 20
SENSOR_GONE = ("the daemon's sensor process is gone, so this run's kernel evidence is incomplete; "
               "no archive was written (see the daemon's log)")


class AddRun(msgspec.Struct, tag="add", frozen=True):
    cgroup_id: int
    net: NetPolicySpec | None = None


class CountersRequest(msgspec.Struct, tag="counters", frozen=True):
    pass


class FenceRequest(msgspec.Struct, tag="fence", frozen=True):
    pass


class Added(msgspec.Struct, tag="added", frozen=True):
    pass


class Failed(msgspec.Struct, tag="failed", frozen=True):
    message: str


class Counts(msgspec.Struct, tag="counts", frozen=True):
    drops: dict[str, int]
    emitted: dict[str, int]
    untracked: int
    fence: bool = False
    hooks_missing: dict[str, str] = {}
    path_source: str = "user_memory"


Request = AddRun | CountersRequest | FenceRequest
Reply = Added | Failed | Counts
_encode = msgspec.msgpack.Encoder().encode
_requests = msgspec.msgpack.Decoder(Request)
_replies = msgspec.msgpack.Decoder(Reply)


def framed(body: bytes) -> bytes:
    return FRAME.pack(len(body)) + body


def pair() -> tuple[socket.socket, socket.socket]:
    """(sensor end, worker end), with buffers large enough for a burst between drains."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    for end in (ours, theirs):
        end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
        end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
    ours.setblocking(False)
    return ours, theirs


class ChannelWriter:
    """The sensor's end of one run's channel: the observer's sink for that run, and its requests."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._backlog = bytearray()
        self._inbox = bytearray()
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

    def reply(self, msg: Reply) -> None:
        """Queue a control frame behind the records queued so far."""
        self._backlog += CONTROL + framed(_encode(msg))

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

    def requests(self) -> list[Request] | None:
        """The worker's complete requests so far; None once it closed its end (or sent garbage)."""
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return None
                self._inbox += data
        except BlockingIOError:
            pass
        except OSError:
            return None
        out: list[Request] = []
        while len(self._inbox) >= FRAME.size:
            (n,) = FRAME.unpack_from(self._inbox)
            if n > REQUEST_MAX:
                return None
            if len(self._inbox) < FRAME.size + n:
                break
            try:
                out.append(_requests.decode(bytes(self._inbox[FRAME.size:FRAME.size + n])))
            except msgspec.DecodeError:
                return None
            del self._inbox[:FRAME.size + n]
        return out


class ChannelSource(Buffered):
    """The worker's end: a `RunSource` (runner/capture/sources.py) fed by the daemon's sensor.

    Creating it adds the run to the kernel maps (answered before it
    returns, so the command's first task is tracked); `close()` ends it.
    """

    def __init__(self, sock: socket.socket, cgroup: RunCgroup, net: NetPolicySpec | None) -> None:
        super().__init__()
        self._sock = sock
        self._buf = bytearray()
        self._replies: list[Reply] = []
        self._final: Counts | None = None
        answer = self._ask(AddRun(cgroup_id=cgroup.id, net=net))
        if isinstance(answer, Failed):
            raise RunnerError(f"the daemon's sensor cannot take the run: {answer.message}")

    def _ask(self, request: Request) -> Reply:
        try:
            self._sock.sendall(framed(_encode(request)))
            while not self._replies:
                if not self._read(block=True):
                    raise OSError("the channel was closed")
        except OSError as exc:
            raise RunnerError(SENSOR_GONE) from exc
        return self._replies.pop(0)

    def wait(self, timeout_ms: int, wake: int | None = None) -> None:
        fd = self._sock.fileno()
        select.select([fd] if wake is None else [fd, wake], [], [], timeout_ms / 1000)

    def drain(self) -> None:
        """Hand on every record that has arrived (never blocks); the channel closing ends the run."""
        try:
            if self._read(block=False):
                return
        except OSError:
            pass
        raise RunnerError(SENSOR_GONE)

    def finish(self) -> None:
        """The final drain: everything before the fence, and the run's final counters."""
        answer = self._ask(FenceRequest())
        if not isinstance(answer, Counts) or not answer.fence:
            raise RunnerError(f"the daemon's sensor answered the fence with {answer!r}")
        self._final = answer

    def counters(self) -> RunCounters:
        counts = self._final
        if counts is None:
            answer = self._ask(CountersRequest())
            if not isinstance(answer, Counts):
                raise RunnerError(f"the daemon's sensor answered a counters request with {answer!r}")
            counts = answer
        return RunCounters(drops=counts.drops, emitted=counts.emitted, untracked=counts.untracked,
                           hooks_missing=counts.hooks_missing, path_source=counts.path_source)

    def drops(self) -> dict[str, int]:
        return self.counters().drops

    def emitted(self) -> dict[str, int]:
        return self.counters().emitted

    def close(self) -> None:
        """End the run in the kernel (the sensor sees the channel close)."""
        self._sock.close()

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
            if block:
                return True

    def _split(self) -> None:
        buf, pos, size = self._buf, 0, FRAME.size
        while len(buf) - pos >= size:
            (n,) = FRAME.unpack_from(buf, pos)
            if n == 0:  # a control frame follows
                if len(buf) - pos < 2 * size:
                    break
                (m,) = FRAME.unpack_from(buf, pos + size)
                if len(buf) - pos - 2 * size < m:
                    break
                self._replies.append(_replies.decode(bytes(buf[pos + 2 * size:pos + 2 * size + m])))
                pos += 2 * size + m
                continue
            if len(buf) - pos - size < n:
                break
            self.sink(bytes(buf[pos + size:pos + size + n]))
            pos += size + n
        del buf[:pos]
