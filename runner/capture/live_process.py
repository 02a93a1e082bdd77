"""The live normalizer in a process of its own: the runner's side (direct mode).

`LiveProcess` has the session-facing methods of `LiveNormalize`
(runner/capture/live.py) and runs the pass in runner/capture/live_child.py,
so it never holds the GIL of the drain loop that runs in the runner's
process. It is started right after the spool's header is written, with
`subprocess` (fork and exec in C, no Python between them: safe in the
runner's multi-threaded process) and these descriptors only:

- a read-only descriptor of the spool file (`Spooler.reader_fd`): the child
  reads whole frames by their length prefix, never past the file's end
  (spool/tail.py), so it needs nothing from the writer;
- the read end of a control pipe: a byte pokes it (the trailer is in),
  EOF ends it at once (`close`);
- one end of a socket pair for its messages (`live_child.Message`), and the
  kernel layer's and the capability surface's descriptors with the last one;
- a shared page where it counts the records it has read (`records_read`).

It runs in a session of its own (a Ctrl-C on the terminal is the runner's
to handle), with the runner's credentials and cgroup (not the command's: the
command is spawned into its cgroup and pid namespace separately), at
SCHED_IDLE until the command exits (`ASSAY_RUNNER_LIVE_NICE=N`: nice +N
instead), at the runner's priority after. It dies with the runner
(PR_SET_PDEATHSIG). A child that dies or goes silent is never waited for
longer than `RESULT_TIMEOUT_S` plus `RESULT_S_PER_RECORD` per record: the
session then normalizes the finished spool itself.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import selectors
import socket
import struct
import subprocess
import sys
import time
from typing import BinaryIO, TypeVar

import msgspec

from normalizer.build import NormalizedRun
from normalizer.deflate import Deflated
from normalizer.kernel_lines import KernelLayer
from normalizer.surface import SurfaceFile
from runner.capture import live_child
from runner.capture.live_child import (
    DECODER,
    POKE,
    PROGRESS_BYTES,
    Done,
    Failed,
    Scanned,
    restore,
    split_frame,
)
from runner.logs import get_logger
from spool.writer import Spooler

_Awaited = TypeVar("_Awaited", Scanned, Done)

RESULT_TIMEOUT_S = 30.0
"""The least the runner waits for a message after the command exits before it gives up on the pass."""
RESULT_S_PER_RECORD = 20e-6
"""Added per spool record: stage A reads about 1M records per CPU second and stage B more; 20x margin."""
HANDED_FILES = 2
"""Descriptors the child sends with `Done`: the kernel layer's deflated segment, then the surface."""
log = get_logger("session")


class HandedLayer(KernelLayer):
    """A kernel layer another process wrote and sealed: its deflate segment (the file), with the
    digest, sweep result, size and line count it sent (normalizer/kernel_lines.py's results)."""

    def __init__(self, file: BinaryIO, done: Done) -> None:
        self._handed = Deflated(file, done.kernel_crc32, done.kernel_size)
        self._sha = done.kernel_sha256
        self._unredacted = done.kernel_unredacted
        self.size = done.kernel_size
        self.count = done.kernel_count

    @property
    def sha256(self) -> str:
        return self._sha

    @property
    def unredacted(self) -> str | None:
        return self._unredacted

    def deflated(self) -> Deflated:
        self._handed.data.seek(0)
        return self._handed

    def end(self) -> None:
        """Nothing to end: sealed by the process that wrote it."""


class LiveProcess:
    """Stage A over the growing spool, then stage B once the trailer is in, in a child process."""

    def __init__(self, spooler: Spooler, run_id: str, priority: str) -> None:
        self._spooler = spooler
        self._run_id = run_id
        self._nice = os.getpriority(os.PRIO_PROCESS, 0)  # the runner's
        self._buffer = bytearray()
        self._fds: list[int] = []
        self._scanned: Scanned | Failed | None = None
        self._deadline: float | None = None
        self.peak_rss_mib: float | None = None
        """The child's peak resident memory, once it has sent the result."""
        self.cpu_s: float | None = None
        """The child's CPU seconds, once it has sent the result."""
        spool_fd = spooler.reader_fd()
        control_r, self._control = os.pipe()
        self._socket, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        progress_fd = os.memfd_create("assay-live-progress", os.MFD_CLOEXEC)
        try:
            os.ftruncate(progress_fd, PROGRESS_BYTES)
            self._progress = mmap.mmap(progress_fd, PROGRESS_BYTES)
            passed = (spool_fd, control_r, theirs.fileno(), progress_fd)
            self._child = subprocess.Popen(
                [sys.executable, "-I", "-m", live_child.__name__, str(os.getpid()), *map(str, passed),
                 priority, run_id],
                pass_fds=passed, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, cwd="/", start_new_session=True)
        except BaseException:
            os.close(self._control)
            self._socket.close()
            raise
        finally:
            for fd in (spool_fd, control_r, progress_fd):
                os.close(fd)
            theirs.close()

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self._child.pid

    @property
    def records_read(self) -> int:
        """How far the pass has got (records read from the spool)."""
        return int(struct.unpack_from("<Q", self._progress)[0])

    def settle(self) -> None:
        """Nothing to wait for: no thread of this process imports or holds a lock for the pass."""

    def hurry(self) -> None:
        """The command has exited: the child runs at the runner's priority from now on, and reads
        what was committed (the trailer, say) without waiting for its next poll."""
        with contextlib.suppress(OSError):  # it has ended: the next message says how
            restore(self._child.pid, self._nice)
            os.write(self._control, POKE)
        if self._deadline is None:
            self._deadline = (time.monotonic() + RESULT_TIMEOUT_S
                              + RESULT_S_PER_RECORD * self._spooler.records)

    def dac_questions(self) -> list[tuple[str, str]] | None:
        """Once stage A is over: the (access, path) pairs it could not judge without permission
        verdicts, or None when the pass failed before (logged)."""
        if self._scanned is None:
            self.hurry()
            from runner.evidence.publish import warm
            warm()  # publish's imports, while the child works
            self._scanned = self._receive(Scanned)
        return self._scanned.questions if isinstance(self._scanned, Scanned) else None

    def result(self) -> NormalizedRun | None:
        """The normalized run once the spool is finished, or None (logged) when the pass failed."""
        if self.dac_questions() is None:
            return None
        done = self._receive(Done)
        if not isinstance(done, Done) or len(self._fds) != HANDED_FILES:
            return None
        self.peak_rss_mib, self.cpu_s = round(done.peak_rss_kib / 1024, 1), done.cpu_s
        kernel_fd, surface_fd = self._fds
        self._fds.clear()
        layer = HandedLayer(os.fdopen(kernel_fd, "rb"), done)
        surface = SurfaceFile(os.fdopen(surface_fd, "rb"), done.surface_sha256, done.surface_size,
                              done.surface_unredacted)
        return NormalizedRun(kernel=layer, surface=surface, **msgspec.structs.asdict(done.run))

    def _receive(self, kind: type[_Awaited]) -> _Awaited | Failed:
        """The child's next message, which must be a `kind`; a `Failed` (logged) otherwise: the
        child failed, ended without it, sent something else, or nothing before the deadline."""
        try:
            message = self._read_message()
        except (OSError, msgspec.DecodeError) as exc:
            message = Failed(error=f"reading the live normalizer's result: {exc}")
        if isinstance(message, kind):
            return message
        if message is None:
            message = Failed(error=self._silence())
        elif not isinstance(message, Failed):
            message = Failed(error=f"the live normalizer sent {type(message).__name__}, not {kind.__name__}")
        log.warning("normalize.live_failed", error=message.error,
                    hint="normalizing the finished spool instead")
        return message

    def _read_message(self) -> live_child.Message | None:
        """The next whole message, None at EOF or past the deadline."""
        assert self._deadline is not None  # set by hurry()
        with selectors.DefaultSelector() as sel:
            sel.register(self._socket, selectors.EVENT_READ)
            while (body := split_frame(self._buffer)) is None:
                if not sel.select(max(0.0, self._deadline - time.monotonic())):
                    return None
                data, fds, _flags, _addr = socket.recv_fds(self._socket, 1 << 20, HANDED_FILES)
                self._fds.extend(fds)
                if not data:
                    return None
                self._buffer += data
        return DECODER.decode(body)

    def _silence(self) -> str:
        """Why no message came: the child ended without one, or sent nothing in time (it is killed)."""
        try:
            code = self._child.wait(max(0.0, (self._deadline or 0) - time.monotonic()))
        except subprocess.TimeoutExpired:
            self._child.kill()
            return "the live normalizer sent nothing in time; it was killed"
        return f"the live normalizer ended without a result (exit status {code})"

    def close(self) -> None:
        """End the child and release everything; once (the session may close a pass it gave up on
        before its own `finally` does). The child is killed: it holds nothing that needs an orderly
        end (its files are anonymous), and its control thread may be waiting for an idle CPU."""
        if self._socket.fileno() < 0:
            return
        os.close(self._control)
        if self._child.poll() is None:
            self._child.kill()
        self._child.wait()
        self._socket.close()
        for fd in self._fds:
            os.close(fd)
        self._progress.close()
