"""The live normalizer's own process (direct mode): stage A while the command runs, stage B after.

In direct mode the ring is drained in the runner's process, by a loop that
needs the GIL for a moment per wake-up; a normalizing thread there, niced and
preempted while it holds the GIL, stalled that loop long enough to overflow
the ring on a loaded machine (docs/benchmarks.md). So the pass runs here, in
a fresh interpreter that shares nothing with the runner but file descriptors
(runner/capture/live.py `LiveProcess` starts it with `python -I -m
runner.capture.live_child`; a fresh interpreter, not a fork: the runner has
threads by then). It follows the spool through its own read-only
descriptor, scans the records as they arrive, and as soon as the trailer is
in (it does not wait to be asked: nothing forks here) runs stage B. What it
hands back on its result socket, each as one length-prefixed msgpack
message:

1. `Scanned`: the permission questions stage A could not judge (the
   session decides from them whether the live result is usable);
2. `Done`: the normalized run's small members as msgspec Structs, and the
   kernel layer and the capability surface as the descriptors of their
   anonymous temp files (SCM_RIGHTS), with their digests, sizes and sweep
   results (the surface holds a value per distinct name: it is never
   copied through this socket nor loaded whole by the runner); or `Failed`
   with the error, at any point.

It dies with the runner (PR_SET_PDEATHSIG, checked against the pid it was
given), and exits at once when the control pipe reaches EOF (the runner
closed the pass). Its temp files are anonymous (O_TMPFILE), so nothing is
left behind however it ends. Its stderr is not the runner's: every problem
reaches the runner as `Failed` and is logged there, as JSON when asked.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import resource
import signal
import socket
import struct
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

import msgspec

from normalizer.artifacts import (
    CorrelationReport,
    ObservationHealth,
    PolicyEvent,
    RunEvent,
    SdkEvent,
)
from normalizer.surface import SurfacePreview

if TYPE_CHECKING:
    from spool.tail import SpoolTail

PR_SET_PDEATHSIG = 1
PROGRESS_BYTES = 8
"""The shared counter of records read (little-endian u64), for `live_behind_records`."""
IDLE = "idle"
"""The priority for SCHED_IDLE (instead of `+N` nice values) while the command runs."""
POKE = b"p"
"""Control byte: more has been committed (the trailer): read now rather than at the next poll."""
_LEN = struct.Struct("<I")


class Scanned(msgspec.Struct, tag="scanned"):
    """Stage A is over: the (access, path) pairs it could not judge without permission verdicts."""

    questions: list[tuple[str, str]]


class Members(msgspec.Struct):
    """The fields of the normalized run (normalizer.build.NormalizedRun) but its kernel layer and
    its capability surface (both descriptors)."""

    run_id: str
    health: ObservationHealth
    correlation: CorrelationReport
    phases: list[RunEvent]
    preview: SurfacePreview
    policy_events: list[PolicyEvent]
    sdk_events: list[SdkEvent]


class Done(msgspec.Struct, tag="done"):
    """The normalized run; its kernel layer and its surface come as descriptors with this message,
    in that order."""

    run: Members
    kernel_sha256: str
    kernel_size: int
    kernel_count: int
    kernel_unredacted: str | None
    """The first secret rule a kernel line still matches after redaction (publish refuses then)."""
    kernel_crc32: int
    surface_sha256: str
    surface_size: int
    surface_unredacted: str | None
    """The first secret rule the surface still matches after redaction (publish refuses then)."""
    peak_rss_kib: int
    """This process's peak resident memory (it is not the runner's: `run.after_exit` logs it)."""
    cpu_s: float
    """This process's CPU seconds (user+system) up to this message."""


class Failed(msgspec.Struct, tag="failed"):
    """The pass failed; the runner normalizes the finished spool instead."""

    error: str


Message = Scanned | Done | Failed
_encoder = msgspec.msgpack.Encoder()
DECODER = msgspec.msgpack.Decoder(Message)


def peak_rss_kib() -> int:
    """This process's own peak RSS (VmHWM): its `ru_maxrss` started at the runner's high-water mark,
    as it was spawned by vfork + exec (Linux carries the old mm's peak over an exec)."""
    with open("/proc/self/status", "rb") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(b"VmHWM:"))


def frame(message: Message) -> bytes:
    """One message as it goes on the result socket: its length, then its msgpack."""
    body = _encoder.encode(message)
    return _LEN.pack(len(body)) + body


def split_frame(buffer: bytearray) -> bytes | None:
    """Take the first whole message's body off `buffer`, or None while it is incomplete."""
    if len(buffer) < _LEN.size:
        return None
    end = _LEN.size + _LEN.unpack_from(buffer)[0]
    if len(buffer) < end:
        return None
    body = bytes(buffer[_LEN.size:end])
    del buffer[:end]
    return body


def lower(tid: int, priority: str, base: int) -> None:
    """Run thread `tid` (0: this one) below the runner while the command runs: SCHED_IDLE
    (`idle`: only CPU time nothing else wants), or nice `base` + `priority`."""
    if priority == IDLE:
        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    else:
        os.setpriority(os.PRIO_PROCESS, tid, base + int(priority))


def restore(tid: int, nice: int) -> None:
    """Back to the runner's priority once the command exits (the pass is then what the user waits
    for): SCHED_OTHER at nice `nice`. Raising a priority needs CAP_SYS_NICE, which the runner has."""
    os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
    os.setpriority(os.PRIO_PROCESS, tid, nice)


class _Counted:
    """The tail's records, with the count read so far published in the shared progress page."""

    def __init__(self, tail: SpoolTail, progress: mmap.mmap) -> None:
        self._tail = tail
        self._progress = progress

    def __iter__(self) -> Iterator[bytes]:
        for batch in self.batches():
            yield from batch

    def batches(self) -> Iterator[list[bytes]]:
        tail = self._tail
        for batch in tail.records().batches():
            yield batch
            struct.pack_into("<Q", self._progress, 0, tail.records_read)


def _follow_control(control_fd: int, tail: SpoolTail) -> None:
    """Pokes wake the tail; EOF (the runner closed the pass, or died) ends this process now."""
    while True:
        data = os.read(control_fd, 64)
        if not data:
            os._exit(0)
        tail.poke()


def _normalize(spool_fd: int, control_fd: int, out: socket.socket, progress: mmap.mmap, run_id: str) -> None:
    """Stage A as the spool grows, then stage B; the messages go to `out`. Imported here, so that
    a failure to import is reported like any other (`main`)."""
    from normalizer.build import finish, scan
    from spool.tail import SpoolTail

    tail = SpoolTail(spool_fd)  # committed = whole frames by length prefix (spool/tail.py)
    threading.Thread(target=_follow_control, args=(control_fd, tail), name="assay-live-control",
                     daemon=True).start()
    scanned = scan(tail.growing(_Counted(tail, progress)))
    out.sendall(frame(Scanned(questions=scanned.scan.judge.questions())))
    run = finish(scanned, tail.finished(), run_id)
    layer = run.kernel
    segment = layer.deflated()  # seals the layer: sweep, digest and deflate done
    usage = resource.getrusage(resource.RUSAGE_SELF)
    members = Members(**{name: getattr(run, name) for name in Members.__struct_fields__})
    done = Done(run=members, kernel_sha256=layer.sha256, kernel_size=layer.size, kernel_count=layer.count,
                kernel_unredacted=layer.unredacted, kernel_crc32=segment.crc32,
                surface_sha256=run.surface.sha256, surface_size=run.surface.size,
                surface_unredacted=run.surface.unredacted,
                peak_rss_kib=peak_rss_kib(), cpu_s=round(usage.ru_utime + usage.ru_stime, 3))
    message = frame(done)
    # the descriptors ride on the length prefix; fileno() moves an in-memory file to a temp file
    socket.send_fds(out, [message[:_LEN.size]], [segment.data.fileno(), run.surface.fileno()])
    out.sendall(message[_LEN.size:])


def main(argv: list[str]) -> int:
    """`PARENT_PID SPOOL_FD CONTROL_FD RESULT_FD PROGRESS_FD PRIORITY RUN_ID` (`lower`'s priority)."""
    parent, spool_fd, control_fd, result_fd, progress_fd = map(int, argv[:5])
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the runner died before the line above: nobody wants the result
        return 1
    out = socket.socket(fileno=result_fd)
    try:
        lower(0, argv[5], os.getpriority(os.PRIO_PROCESS, 0))  # `restore`d when the command exits
        progress = mmap.mmap(progress_fd, PROGRESS_BYTES)
        _normalize(spool_fd, control_fd, out, progress, argv[6])
    except BaseException as exc:  # every failure goes to the runner, which logs it
        out.sendall(frame(Failed(error=f"{type(exc).__name__}: {exc}")))
        return 1
    return 0


if __name__ == "__main__":
    os._exit(main(sys.argv[1:]))  # no teardown: the result is sent, the heap goes with the process
