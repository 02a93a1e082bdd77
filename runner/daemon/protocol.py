"""The daemon's wire protocol: small, versioned, and safe against a hostile peer.

A message is one frame: a 4-byte big-endian length, then a msgpack body
decoded by msgspec into exactly one of the tagged Structs below (strict:
unknown fields, wrong types and unknown tags are errors). Frames are
bounded (`MAX_FRAME`), and so are the run request's argv and environment,
so a peer can make the daemon read at most that much before it answers
with a one-line `Refused`.

Strings a caller hands over that are really OS bytes (argv, environment,
paths) travel as bytes, so any byte in a name survives the trip unchanged
(Python's surrogateescape on both ends).

File descriptors travel with SCM_RIGHTS on the first frame of a run request,
in the order of `RUN_FDS`: the caller's stdin, stdout, stderr, its opened
`--out` directory and its working directory. The daemon only ever writes the
archive through that directory descriptor.
"""

from __future__ import annotations

import array
import os
import socket
import struct

import msgspec

from normalizer.artifacts import RUN_ID_MAX, is_safe_run_id
from policy.model import Policy
from runner.display import printable

VERSION = 1
MAX_FRAME = 1 << 20
MAX_ARGS = 4096
MAX_ENV = 4096
MAX_ARG_BYTES = 256 * 1024
"""Total bytes of argv plus environment (the kernel's own limit is in this range)."""
MAX_RLIMITS = 16
"""RLIM_NLIMITS on Linux."""
RLIM_INFINITY = -1
RUN_FDS = ("stdin", "stdout", "stderr", "out_dir", "cwd")
_HEADER = struct.Struct(">I")


class ProtocolError(ValueError):
    """A peer sent something that is not a valid message: one line, said back to it."""


class _Msg(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="type"):
    """Subclasses repeat `frozen=True`: msgspec inherits it, a type checker does not know that."""


# --- client to daemon ----------------------------------------------------------------------


class RunStart(_Msg, tag="run", frozen=True):
    """Start a run. The fds of `RUN_FDS` come with this frame."""

    version: int
    run_id: str
    exe: bytes
    argv: list[bytes]
    env: dict[bytes, bytes]
    workdir: bytes
    """The caller's view of its working directory; must be the directory of the cwd fd."""
    out_display: str
    """`--out` resolved by the client, for the summary line only (never opened by the daemon)."""
    ringbuf_pages: int
    isolate_net: bool = False
    allow_compat_syscalls: bool = False
    """`run --allow-compat-syscalls` (runner/enforce/seccomp.py)."""
    user: int | None = None
    """Run as this uid instead of the caller's: only a root caller may ask for another uid."""
    policy: Policy | None = None
    """The caller's policy document, resolved and met with the floor by the daemon."""
    status_line: bool = False
    """The caller's stderr is a terminal: send `Progress` for the live status line."""
    umask: int = 0o022
    rlimits: list[tuple[int, int, int]] = []
    """(resource, soft, hard) of the caller; the command gets these (capped by the daemon's)."""


class Interrupt(_Msg, tag="interrupt", frozen=True):
    """Ctrl-C in the client: SIGINT to the command, a second one ends the run."""


class StatusQuery(_Msg, tag="status", frozen=True):
    version: int


ClientMessage = RunStart | Interrupt | StatusQuery


# --- daemon to client ----------------------------------------------------------------------


class Started(_Msg, tag="started", frozen=True):
    run_id: str


class Progress(_Msg, tag="progress", frozen=True):
    events: int
    drops: int
    elapsed_s: float
    """Since the run's drain loop started: the moment direct mode's status line starts counting."""


class Finished(_Msg, tag="finished", frozen=True):
    exit_code: int
    summary: str


class Refused(_Msg, tag="refused", frozen=True):
    """The request cannot be served; `message` is one line for the user (make it with `refused`)."""

    message: str
    exit_code: int = 125


def refused(message: str, exit_code: int = 125) -> Refused:
    """A `Refused` whose message is already terminal-safe (`printable`, which is idempotent).

    The Python client escapes the line it prints anyway; the C client
    (fastclient.c) prints it as it comes, so the escaping is done here, once.
    """
    return Refused(message=printable(message), exit_code=exit_code)


class RunInfo(msgspec.Struct, frozen=True):
    run_id: str
    caller_uid: int
    caller_pid: int
    age_s: float
    events: int
    drops: int
    worker_pid: int


class ShipInfo(msgspec.Struct, frozen=True):
    """An archive waiting in the daemon's shipping queue (runner/ship/queue.py)."""

    run_id: str
    path: str
    attempts: int
    last_error: str


class StatusReply(_Msg, tag="status_reply", frozen=True):
    version: int
    pid: int
    uptime_s: float
    runs: list[RunInfo]
    bpf_programs: int
    """BPF programs the daemon and its run workers hold (counted from /proc/PID/fdinfo)."""
    rss_bytes: int
    """Resident memory of the daemon plus its run workers."""
    max_concurrent_runs: int
    ship_ref: str | None = None
    """Where finished archives are pushed ([ship] ref), None when they are not."""
    ship_queue: list[ShipInfo] = msgspec.field(default_factory=list)
    shipped: int = 0
    """Archives pushed since the daemon started."""
    metrics: dict[str, float] = {}
    """The daemon's counters, as its metrics endpoint serves them (runner/daemon/metrics.py)."""


DaemonMessage = Started | Progress | Finished | Refused | StatusReply

_client_decoder = msgspec.msgpack.Decoder(ClientMessage)
_daemon_decoder = msgspec.msgpack.Decoder(DaemonMessage)
_encoder = msgspec.msgpack.Encoder()


def encode(msg: _Msg) -> bytes:
    body = _encoder.encode(msg)
    if len(body) > MAX_FRAME:
        raise ProtocolError(f"message of {len(body)} bytes exceeds the {MAX_FRAME}-byte frame limit")
    return _HEADER.pack(len(body)) + body


def decode_client(body: bytes) -> RunStart | Interrupt | StatusQuery:
    """A client's message, checked for the limits the types cannot say."""
    try:
        msg = _client_decoder.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # a str that is not UTF-8
        raise ProtocolError(f"bad request: {printable(str(exc))}") from None
    if isinstance(msg, RunStart | StatusQuery) and msg.version != VERSION:
        raise ProtocolError(f"protocol version {msg.version} is not supported (daemon speaks {VERSION}); "
                            "use the assay-runner that matches the daemon")
    if isinstance(msg, RunStart):
        _check_run(msg)
    return msg


def decode_daemon(body: bytes) -> Started | Progress | Finished | Refused | StatusReply:
    try:
        return _daemon_decoder.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # a str that is not UTF-8
        raise ProtocolError(f"bad reply from the daemon: {printable(str(exc))}") from None


def _check_run(msg: RunStart) -> None:
    if not is_safe_run_id(msg.run_id) or len(msg.run_id) > RUN_ID_MAX:
        raise ProtocolError(f"invalid run id {msg.run_id!r}: use 1-{RUN_ID_MAX} ASCII letters, digits, "
                            "'_' or '-'")
    if not msg.argv or len(msg.argv) > MAX_ARGS or len(msg.env) > MAX_ENV:
        raise ProtocolError(f"argv must have 1 to {MAX_ARGS} items and the environment at most {MAX_ENV}")
    size = sum(map(len, msg.argv)) + sum(len(k) + len(v) for k, v in msg.env.items())
    if size > MAX_ARG_BYTES:
        raise ProtocolError(f"argv and environment total {size} bytes, more than {MAX_ARG_BYTES}")
    for item in (msg.exe, msg.workdir, *msg.argv, *msg.env, *msg.env.values()):
        if b"\0" in item:
            raise ProtocolError("argv, environment and paths cannot contain NUL bytes")
    if any(not k or b"=" in k for k in msg.env):
        raise ProtocolError("environment names must be non-empty and contain no '='")
    if len(msg.rlimits) > MAX_RLIMITS or not 0 <= msg.umask <= 0o777:
        raise ProtocolError(f"at most {MAX_RLIMITS} resource limits and a umask within 0o777")
    if any(not 0 <= r < MAX_RLIMITS or min(soft, hard) < RLIM_INFINITY for r, soft, hard in msg.rlimits):
        raise ProtocolError("resource limits must name a known resource with limits >= -1 (infinity)")
    if not msg.exe.startswith(b"/") or not msg.workdir.startswith(b"/"):
        raise ProtocolError("exe and workdir must be absolute paths")


def os_bytes(text: str) -> bytes:
    """A str that came from the OS back to its exact bytes."""
    return os.fsencode(text)


def os_text(raw: bytes) -> str:
    """OS bytes as the str Python's os functions use (surrogateescape), any byte kept."""
    return os.fsdecode(raw)


# --- framing -------------------------------------------------------------------------------


def send(sock: socket.socket, msg: _Msg, fds: list[int] | tuple[int, ...] = ()) -> None:
    """Send one frame; `fds` ride along with its first byte."""
    data = encode(msg)
    if fds:
        sent = sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        data = data[sent:]
    if data:
        sock.sendall(data)


class FrameReader:
    """Accumulates frames (and SCM_RIGHTS fds) from a stream socket, blocking or not.

    Received fds are owned by the reader until `take_fds`; `close` closes
    whatever was not taken, so a peer cannot leak descriptors into the daemon.
    It never reads past the frame it is completing: the server hands a run's
    connection to its worker after the request, and a client's `Interrupt`
    sent right behind the request must still be in the socket for the worker.
    """

    def __init__(self, max_fds: int = len(RUN_FDS)) -> None:
        self._buf = bytearray()
        self._fds: list[int] = []
        self._max_fds = max_fds
        self.eof = False

    def feed(self, sock: socket.socket) -> None:
        """One recvmsg; raises BlockingIOError on a non-blocking socket with nothing to read."""
        space = socket.CMSG_SPACE(self._max_fds * 4)
        data, ancdata, flags, _ = sock.recvmsg(min(65536, self._wanted()), space, socket.MSG_CMSG_CLOEXEC)
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
                self._fds.extend(fds)
        if flags & socket.MSG_CTRUNC or len(self._fds) > self._max_fds:
            self.close()
            raise ProtocolError(f"too many file descriptors (at most {self._max_fds})")
        if not data:
            self.eof = True
        self._buf += data
        if len(self._buf) >= _HEADER.size and _HEADER.unpack_from(self._buf)[0] > MAX_FRAME:
            raise ProtocolError(f"frame larger than {MAX_FRAME} bytes")

    def _wanted(self) -> int:
        """Bytes to the end of the frame being completed (its header first), at least one."""
        if len(self._buf) < _HEADER.size:
            return _HEADER.size - len(self._buf)
        (size,) = _HEADER.unpack_from(self._buf)
        return max(1, _HEADER.size + min(size, MAX_FRAME) - len(self._buf))

    def frame(self) -> bytes | None:
        """The next complete frame body, or None until one is complete."""
        if len(self._buf) < _HEADER.size:
            return None
        (size,) = _HEADER.unpack_from(self._buf)
        if len(self._buf) < _HEADER.size + size:
            return None
        body = bytes(self._buf[_HEADER.size:_HEADER.size + size])
        del self._buf[:_HEADER.size + size]
        return body

    def take_fds(self) -> list[int]:
        fds, self._fds = self._fds, []
        return fds

    def close(self) -> None:
        for fd in self.take_fds():
            os.close(fd)


def receive(sock: socket.socket, reader: FrameReader) -> bytes | None:
    """Block until a whole frame arrives; None on a clean end of stream."""
    while (body := reader.frame()) is None:
        if reader.eof:
            return None
        reader.feed(sock)
    return body

