"""The raw spool: what the runner captured, exactly as the kernel handed it over.

A spool is a stream of length-prefixed msgpack frames: one `SpoolHeader`,
then `Batch`es of raw ring-buffer records and `Phase` markers in arrival
order, then one `SpoolTrailer`. It keeps runner-clock times and host pids
(normalized members never do), so any capture can be re-normalized offline
with `assay-runner normalize SPOOL`.
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from policy.model import ResolvedPolicy
from spool import accel

SPOOL_FORMAT = "assay.runner.raw_spool.v1"
_LEN = struct.Struct("<I")
FRAME_HEAD = _LEN.size
"""Bytes of a frame's length prefix."""
MAX_FRAME = 256 << 20
READ_BYTES = 1 << 20
"""Bytes a spool reader asks for at a time: many small frames per read (a larger frame whole)."""
RECORDS_PER_LIST = 4096
"""Records `SpoolRecords.batches` gathers into one list from consecutive small batches."""


class SpoolHeader(msgspec.Struct, tag="header"):
    """Who ran what, and how the monitor was set up."""

    format: str
    run_id: str
    argv: list[str]
    """The command line in v0 text (normalizer/text.py): any byte survives, losslessly."""
    workdir: str
    """The command's working directory in v0 text: the base of relative paths."""
    control_pids: list[int]
    """Host tgids of the runner's own helper processes (pid-namespace parent and init)."""
    shim_pid: int
    """Host tgid of the pid-namespace init that forks the command."""
    ringbuf_pages: int
    platform: str = "linux"
    uid: int = 0
    """The uid the command ran as: root bypasses file permission checks."""
    policy: ResolvedPolicy | None = None
    """The policy the run enforced, as resolved for this run."""
    cgroup_path: str = ""
    """The run's cgroup below the cgroup2 mount: moves out of it are escapes."""


class Batch(msgspec.Struct, tag="batch"):
    """Raw records drained from the ring buffer in one go, in ring order."""

    records: list[bytes]


class Phase(msgspec.Struct, tag="phase"):
    """A runner phase marker stamped on the runner clock (CLOCK_MONOTONIC ns)."""

    name: str
    ts: int


class SdkMessage(msgspec.Struct, tag="sdk"):
    """One message from the agent's SDK channel, stamped on receipt.

    `ts` is the runner clock when the message arrived; the agent waits for
    the runner's reply, so a `tool_call_started` stamp precedes the tool's
    work and a `tool_call_finished` stamp follows it. `decision`/`rule` are
    the runner's tool-policy answer to a `tool_call_started`.
    """

    ts: int
    event: str
    sdk_name: str = ""
    sdk_version: str = ""
    tool: str | None = None
    tool_call_id: str | None = None
    status: str | None = None
    decision: str | None = None
    rule: str | None = None


class DacVerdicts(msgspec.Struct, tag="dac"):
    """Would ordinary file permissions have allowed these accesses? (runner-checked)

    Keys are `read:<path>` / `write:<path>` for failed opens the policy also
    refuses; the runner checks them as the command's user after the run, so
    the normalizer can tell a Landlock denial from a permission denial
    (normalizer/blocks.py).
    """

    allowed: dict[str, bool]


class SpoolTrailer(msgspec.Struct, tag="trailer"):
    """Counters read after the final drain."""

    exit_code: int
    drops: dict[str, int]
    emitted: dict[str, int]
    untracked_tasks: int = 0
    """Run tasks the BPF lineage map was too full to track: their events are missing."""
    ended_by: str | None = None
    """Why the run was ended from outside the command while it ran (`sigint`, `sigterm`, `sighup`,
    `client_disconnected`, `daemon_shutdown`; runner/capture/interrupt.py)."""
    limits: dict[str, int] = msgspec.field(default_factory=dict)
    """The resource limits the run's cgroup had (`pids_max`, `memory_max`)."""
    limits_hit: dict[str, int] = msgspec.field(default_factory=dict)
    """How often a limit refused the run (`pids_refused`: forks refused; `oom_kills`: tasks the OOM
    killer took), from pids.events/memory.events (runner/capture/limits.py)."""
    limits_unavailable: list[str] = msgspec.field(default_factory=list)
    """Default limits the host could not enforce: no such controller in its cgroup hierarchies."""
    refused_syscalls: dict[str, int] = msgspec.field(default_factory=dict)
    """Calls the command's seccomp filter refused, by class (`compat_i386`, `compat_x32`,
    `io_uring`, `user_namespace`; runner/enforce/seccomp.py), as its supervisor answered them."""
    compat_syscalls_allowed: bool = False
    """`--allow-compat-syscalls`: non-native ABI calls ran, and no tracepoint sees them."""
    hooks_missing: dict[str, str] = msgspec.field(default_factory=dict)
    """Hooks the kernel lacked (ebpf/probing.py): name -> `absent_by_kernel` (no such syscall there)
    or `lost` (the syscall exists, its tracepoint does not: what went through it is not seen)."""
    path_source: str = "user_memory"
    """Where the paths of opens came from: `kernel` (the monitor recorded each open's own path at
    security_file_open, ebpf/kpaths.py) or `user_memory` (the syscall's argument string only)."""
    recovered: str | None = None
    """Set when this trailer was not written by the run but by a later recovery (`runner_died`):
    the capture's end, the command's exit and the kernel's counters are unknown (spool/recover.py)."""
    last_flush_ns: int | None = None
    """A recovered spool's last write before the runner died (the partial file's mtime, CLOCK_REALTIME)."""
    died_ns: int | None = None
    """When the runner died (CLOCK_REALTIME), if its warden saw it: from `last_flush_ns` to here nothing
    was observed; None: unknown."""


Frame = SpoolHeader | Batch | Phase | SdkMessage | DacVerdicts | SpoolTrailer


class SpoolError(ValueError):
    """The spool is truncated or not a spool."""


class SpoolRecords:
    """The raw records of a spool file, streamed in ring order each time it is iterated.

    Normalizing never holds the whole capture in memory: records are read
    back batch by batch from disk.
    """

    def __init__(self, path: Path) -> None:
        self._path = path

    def __iter__(self) -> Iterator[bytes]:
        for batch in self.batches():
            yield from batch

    def batches(self) -> Iterator[list[bytes]]:
        """The records in ring order, in lists the normalizer walks without a generator step per
        record: consecutive batches joined up to `RECORDS_PER_LIST` (the consumer may drain a
        few records at a time, and each list costs the walk a call), a larger batch whole.

        The whole batch frames of each block read are taken by `batch_records` (in C when
        spool/framescan.c is built); the frame it stops at goes the general way (`FrameReader.body`).
        """
        native = accel.native
        take = native.batch_records if native else batch_records
        pending: list[bytes] = []
        with open(self._path, "rb") as f:
            frames = FrameReader(f)
            while True:
                frames.pos = take(frames.block, frames.pos, frames.end, pending, RECORDS_PER_LIST,
                                  _BATCH_HEAD)
                if len(pending) >= RECORDS_PER_LIST:
                    yield pending
                    pending = []
                    continue
                body = frames.body()
                if body is None:
                    break
                frame = _decode(body)
                if isinstance(frame, Batch):
                    if pending:
                        pending += frame.records
                    else:
                        pending = frame.records
                    if len(pending) >= RECORDS_PER_LIST:
                        yield pending
                        pending = []
        if pending:
            yield pending


class Spool(msgspec.Struct):
    """A spool read back: the small frames in memory, the records as any re-iterable."""

    header: SpoolHeader
    records: Iterable[bytes]
    phases: list[Phase]
    trailer: SpoolTrailer
    sdk: list[SdkMessage] = msgspec.field(default_factory=list)
    dac: dict[str, bool] = msgspec.field(default_factory=dict)


_encoder = msgspec.msgpack.Encoder()
_decoder: msgspec.msgpack.Decoder[Frame] = msgspec.msgpack.Decoder(Frame)


def encode_frame(frame: Frame) -> bytes:
    """One frame, length prefix included."""
    body = _encoder.encode(frame)
    return _LEN.pack(len(body)) + body


def _file_left(stream: io.BufferedIOBase) -> int | None:
    """Bytes left in a file from its current offset (None when it is not a file: then
    MAX_FRAME is the bound a length prefix must keep)."""
    try:
        return os.fstat(stream.fileno()).st_size - stream.tell()
    except (OSError, AttributeError, io.UnsupportedOperation):
        return None


_BATCH_HEAD = b"\x82\xa4type\xa5batch\xa7records"
"""msgpack of a Batch up to its records array: a 2-entry map, the tag first (as msgspec writes it)."""


def batch_head(count: int, items_size: int) -> bytes:
    """The bytes of a Batch frame before its `count` records, which are already encoded as
    msgpack `bin` items (`items_size` bytes in all) and follow it unchanged: head + items
    is what `encode_frame(Batch(records=...))` gives for those records (tests/test_ringsink.py),
    built without a Python object per record."""
    if count < 16:
        array = bytes([0x90 | count])
    elif count < 1 << 16:
        array = b"\xdc" + count.to_bytes(2, "big")
    else:
        array = b"\xdd" + count.to_bytes(4, "big")
    return _LEN.pack(len(_BATCH_HEAD) + len(array) + items_size) + _BATCH_HEAD + array


def iter_frames(stream: io.BufferedIOBase) -> Iterator[Frame]:
    """Frames in file order; raises SpoolError on a torn or foreign frame."""
    frames = FrameReader(stream)
    while (body := frames.body()) is not None:
        yield _decode(body)


def _decode(body: bytes | memoryview) -> Frame:
    try:
        return _decoder.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # a str that is not UTF-8
        # ascii(): msgspec quotes the bad value, which may hold a newline; the error stays one line
        raise SpoolError(f"undecodable frame: {ascii(str(exc))[1:-1]}") from exc


class FrameReader:
    """The frames of a stream in file order, read in blocks; raises SpoolError on a torn one.

    The stream is read in blocks of `READ_BYTES` (a larger frame whole) into
    one buffer kept for the whole stream (fresh memory costs a page fault per
    page: a new buffer per block cost more than the copy), and the file's size
    asked once, so a spool of many small frames costs a few reads, not two per
    frame. A length prefix that announces more than the file holds past it is
    refused before anything is read for it; any other short body is a torn
    frame too.

    `body` gives one frame at a time. A caller may also walk the whole frames
    of `block[pos:end]` itself (`batch_records`, `skip_frames`: in C when
    spool/framescan.c is built) and set `pos` to where it stopped: frames inside a
    block read are whole, and the one cut by the block's end is left to `body`.
    """

    def __init__(self, stream: io.BufferedIOBase) -> None:
        self._stream = stream
        self._file_left = _file_left(stream)
        self.block = bytearray()
        """The buffer: block[pos:end] are the bytes read and not yet given."""
        self.pos = 0
        self.end = 0
        self._before = 0
        """Bytes of the stream before block[0]."""

    def _more(self, need: int) -> None:
        """Keep block[pos:end] and read at least `need` more bytes after it (fewer at the end)."""
        rest = self.end - self.pos
        want = max(READ_BYTES, rest + need)
        if len(self.block) < want:
            grown = bytearray(want)
            grown[:rest] = self.block[self.pos:self.end]
            self.block = grown
        elif rest:
            self.block[:rest] = self.block[self.pos:self.end]
        self._before += self.pos
        self.pos, self.end = 0, rest
        with memoryview(self.block) as view:
            while self.end < want and (n := self._stream.readinto(view[self.end:want])):
                self.end += n

    def body(self, skip: bytes | None = None) -> bytes | None:
        """The next frame's body (None at the end of the stream). With `skip`, a frame whose
        body starts with those bytes is checked whole but not copied out: `SKIPPED` stands for it."""
        if self.end - self.pos < FRAME_HEAD:
            self._more(FRAME_HEAD - (self.end - self.pos))
            if not self.end:
                return None
            if self.end < FRAME_HEAD:
                raise SpoolError("torn frame length at end of spool")
        size = frame_size(self.block[self.pos:self.pos + FRAME_HEAD])
        self.pos += FRAME_HEAD
        taken = self._before + self.pos
        left = MAX_FRAME if self._file_left is None else self._file_left - taken
        if size > left:
            raise SpoolError(f"torn frame at end of spool: {size} bytes announced, {left} left "
                             "(the run did not finish writing it, or this is not a spool)")
        if self.end - self.pos < size:
            self._more(size - (self.end - self.pos))
            if self.end < size:
                raise SpoolError("torn frame at end of spool (the run did not finish writing it)")
        start = self.pos
        self.pos += size
        if skip is not None and self.block.startswith(skip, start, self.pos):
            return SKIPPED
        with memoryview(self.block) as view:
            return bytes(view[start:self.pos])


SKIPPED = b"skipped"
"""What `FrameReader.body` gives for a skipped frame (tested by identity: a body is a new object)."""


_RECORDS = msgspec.msgpack.Decoder(list[bytes])


def batch_records(block: bytearray, pos: int, end: int, out: list[bytes], limit: int, head: bytes) -> int:
    """Append to `out` the records of each whole batch frame of `block[pos:end]`, while `out`
    holds fewer than `limit`; the offset of the first frame not taken (cut by `end`, over
    MAX_FRAME, or not a batch frame: `head`, then one msgpack array of `bin` items that ends
    with the frame).

    The C accelerator has the same function (spool/framescan.c); this is its fallback and
    reference (tests/test_spool_reader.py).
    """
    while len(out) < limit and end - pos >= FRAME_HEAD:
        (size,) = _LEN.unpack_from(block, pos)
        stop = pos + FRAME_HEAD + size
        if size > MAX_FRAME or stop > end or not block.startswith(head, pos + FRAME_HEAD, stop):
            break
        try:
            records = _RECORDS.decode(memoryview(block)[pos + FRAME_HEAD + len(head):stop])
        except msgspec.DecodeError:
            break
        out += records
        pos = stop
    return pos


def skip_frames(block: bytearray, pos: int, end: int, head: bytes) -> int:
    """The offset of the first frame of `block[pos:end]` that is not whole (cut by `end`, or over
    MAX_FRAME) or whose body does not start with `head`.

    The C accelerator has the same function (spool/framescan.c); this is its fallback and
    reference (tests/test_spool_reader.py).
    """
    while end - pos >= FRAME_HEAD:
        (size,) = _LEN.unpack_from(block, pos)
        stop = pos + FRAME_HEAD + size
        if size > MAX_FRAME or stop > end or not block.startswith(head, pos + FRAME_HEAD, stop):
            break
        pos = stop
    return pos


def frame_size(head: bytes | bytearray | memoryview) -> int:
    """The body size a frame's 4-byte length prefix announces; SpoolError past MAX_FRAME."""
    size: int
    (size,) = _LEN.unpack(head)
    if size > MAX_FRAME:
        raise SpoolError(f"frame of {size} bytes is too large; not an assay-runner spool?")
    return size


def decode_frame(body: bytes | memoryview) -> Frame:
    """One frame's body (without its length prefix); SpoolError when it is not a frame."""
    return _decode(body)


def read_spool(path: Path) -> Spool:
    """Read a complete spool; incomplete or foreign ones raise SpoolError.

    Records stay on disk (`SpoolRecords`); everything else is loaded. A batch frame is
    recognized by its first bytes and not decoded here (the records are decoded once, when
    they are walked: a batch that does not decode raises SpoolError then).
    """
    header: SpoolHeader | None = None
    trailer: SpoolTrailer | None = None
    phases: list[Phase] = []
    sdk: list[SdkMessage] = []
    dac: dict[str, bool] = {}
    native = accel.native
    skip = native.skip_frames if native else skip_frames
    with open(path, "rb") as f:
        frames = FrameReader(f)
        while (body := frames.body(None if header is None else _BATCH_HEAD)) is not None:
            if body is SKIPPED:  # a batch frame after the header
                frames.pos = skip(frames.block, frames.pos, frames.end, _BATCH_HEAD)
                continue
            frame = _decode(body)
            if header is None and not isinstance(frame, SpoolHeader):
                raise SpoolError(f"{path} does not start with a spool header; not an assay-runner spool")
            if isinstance(frame, SpoolHeader):
                if frame.format != SPOOL_FORMAT:
                    raise SpoolError(f"spool format {frame.format!r}, expected {SPOOL_FORMAT!r}")
                header = frame
            elif isinstance(frame, Batch):
                continue
            elif isinstance(frame, Phase):
                phases.append(frame)
            elif isinstance(frame, SdkMessage):
                sdk.append(frame)
            elif isinstance(frame, DacVerdicts):
                dac.update(frame.allowed)
            else:
                trailer = frame
    if header is None:
        raise SpoolError(f"{path} has no spool header; not an assay-runner spool")
    if trailer is None:
        raise SpoolError(f"{path} has no trailer: the run was interrupted before it finished")
    return Spool(header=header, records=SpoolRecords(path), phases=phases, trailer=trailer,
                 sdk=sdk, dac=dac)
